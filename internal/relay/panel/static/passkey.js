// Passkeys, with nothing inline (the CSP allows none): the sign-in page's
// "Sign in with a passkey" and the Passkeys page's "Add a passkey". The
// relay's options and the browser's answer travel as WebAuthn's JSON.
"use strict";

function passkeyPost(url, fields) {
  return fetch(url, { method: "POST", credentials: "same-origin", body: new URLSearchParams(fields) });
}

function passkeyError(form, message) {
  const el = form.querySelector("#passkey-error");
  el.textContent = message;
  el.hidden = false;
}

async function passkeySignIn(form) {
  const refused = form.dataset.refused;
  try {
    const begun = await passkeyPost("/panel/login/passkey/begin", {});
    if (!begun.ok) return passkeyError(form, refused);
    const options = PublicKeyCredential.parseRequestOptionsFromJSON(await begun.json());
    const credential = await navigator.credentials.get({ publicKey: options });
    const done = await passkeyPost("/panel/login/passkey", {
      credential: JSON.stringify(credential.toJSON()),
      next: form.querySelector('[name="next"]').value,
    });
    const answer = await done.json();
    if (!done.ok) return passkeyError(form, answer.error || refused);
    location.assign(answer.next);
  } catch (e) {
    passkeyError(form, refused);
  }
}

async function passkeyAdd(form) {
  const csrf = form.dataset.csrf;
  try {
    const begun = await passkeyPost("/panel/passkeys/begin", { csrf });
    const options = await begun.json();
    if (!begun.ok) return passkeyError(form, options.error);
    const credential = await navigator.credentials.create({ publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(options) });
    const done = await passkeyPost("/panel/passkeys", { csrf, credential: JSON.stringify(credential.toJSON()) });
    const answer = await done.json();
    if (!done.ok) return passkeyError(form, answer.error);
    location.assign(answer.next);
  } catch (e) {
    passkeyError(form, "The passkey was not added: " + e.message);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  for (const form of document.querySelectorAll("form[data-passkey-signin]")) {
    form.addEventListener("submit", (ev) => { ev.preventDefault(); passkeySignIn(form); });
  }
  for (const form of document.querySelectorAll("form[data-passkey-add]")) {
    form.addEventListener("submit", (ev) => { ev.preventDefault(); passkeyAdd(form); });
  }
});
