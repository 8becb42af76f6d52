package downloads

import (
	"bytes"
	_ "embed"
	"errors"
	"net/url"
	"strings"
)

//go:generate cp install.sh ../../../install/install.sh

// script is install.sh as written, with urlMark where the relay's URL
// goes; install/install.sh is a copy for reading (go generate).
//
//go:embed install.sh
var script []byte

// urlMark is the quoted word Script replaces with the relay's URL.
const urlMark = "'@RELAY_URL@'"

// errPublicURL refuses a URL the script cannot carry.
var errPublicURL = errors.New("the relay's public URL is not an http:// or https:// URL of a host, without user, query or fragment")

// Script is install.sh for the relay at publicURL.
func Script(publicURL string) ([]byte, error) {
	base, err := checkURL(publicURL)
	if err != nil {
		return nil, err
	}
	return bytes.Replace(script, []byte(urlMark), []byte("'"+base+"'"), 1), nil
}

// CodeEnv is the environment variable that carries an enrollment code to
// install.sh and to commandcore enroll. Any local user can read a
// process's command line (/proc/PID/cmdline), only its own user and root
// its environment, so the lines below put the code there: an assignment
// before a command is in the environment of that command, not in its
// arguments.
const CodeEnv = "COMMANDCORE_ENROLL_CODE"

// InstallLine is the line a person pastes on a device to install the
// agent from the relay at publicURL and enroll it with code. From an https
// relay, curl fetches the script over https alone, redirects included.
func InstallLine(publicURL, code string) string {
	base := strings.TrimRight(publicURL, "/")
	proto := ""
	if strings.HasPrefix(base, "https://") {
		proto = "--proto '=https' "
	}
	return "curl " + proto + "-fsSL " + base + ScriptPath + " | " + CodeEnv + "=" + code + " sh"
}

// EnrollLine is the line that enrolls a device with the agent installed
// at servers (one URL, or replicas' URLs separated by commas) with code.
func EnrollLine(servers, code string) string {
	return CodeEnv + "=" + code + " commandcore enroll --server " + servers
}

// checkURL returns publicURL without a trailing slash if it is a URL the
// script may hold in single quotes: an http or https URL of a host, of
// URL characters only, without user, query or fragment.
func checkURL(publicURL string) (string, error) {
	u, err := url.Parse(publicURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.ContainsFunc(publicURL, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune(":/.-_~%[]", r))
	}) {
		return "", errPublicURL
	}
	return strings.TrimRight(publicURL, "/"), nil
}
