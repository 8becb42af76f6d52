// Copy buttons, with nothing inline (the CSP allows none): a button with
// data-copy="ID" copies the text of the element ID, such as a token shown
// once, and says whether it did.
"use strict";

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    // No clipboard API (a page not in a secure context): select and copy.
    const area = Object.assign(document.createElement("textarea"), { value: text, readOnly: true });
    document.body.append(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    return ok;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  for (const button of document.querySelectorAll("button[data-copy]")) {
    const source = document.getElementById(button.dataset.copy);
    if (!source) continue;
    button.addEventListener("click", async () => {
      const ok = await copyText(source.textContent);
      button.textContent = ok ? "Copied" : "Copy failed: select the text";
    });
  }
});
