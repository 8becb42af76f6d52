package limits

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"
	"time"
)

const (
	kib = 1024
	mib = 1024 * kib
	day = 24 * time.Hour
)

// counts pins every size and count bound by the number the contract gives
// (the README, or a tool's schema in docs/tools.md); where none states it,
// the comment says where today's number comes from. A new bound gets a row
// here or in durations.
var counts = map[string]struct{ got, want int64 }{
	// Internal: twice and more the size of today's static binaries.
	"UpdateMaxBytes":          {UpdateMaxBytes, 256 * mib},
	"MaxLiveJobs":             {MaxLiveJobs, 32},              // README, Managed jobs: at most 32 live jobs
	"MaxRetainedTerminalJobs": {MaxRetainedTerminalJobs, 100}, // README, Managed jobs: up to 100
	"CaptureHeadBytes":        {CaptureHeadBytes, 512 * kib},  // README, Managed jobs: first 512 KiB
	"CaptureTailBytes":        {CaptureTailBytes, 512 * kib},  // README, Managed jobs: last 512 KiB
	// Internal, capture file format: the tail ring's slack (header field).
	"CaptureRingSlack": {CaptureRingSlack, 64 * kib},
	// Internal: the supervisor's read from a job's output.
	"CaptureReadBytes":  {CaptureReadBytes, 256 * kib},
	"OutputPageDefault": {OutputPageDefault, 32 * kib}, // process.output's schema: default 32768
	"OutputPageMax":     {OutputPageMax, 1 * mib},      // process.output's schema: at most 1048576
	"LiveChunkBytes":    {LiveChunkBytes, 8 * kib},     // README, Tools and The relay and the link: 8 KiB
	"LiveQueueFrames":   {LiveQueueFrames, 64},         // README, The relay and the link: 64 frames
	// docs/tools.md process.run: max_bytes default 65536, at most 1048576 (output_capture.limit_bytes).
	"RunOutputDefaultBytes": {RunOutputDefaultBytes, 64 * kib},
	"RunOutputCapBytes":     {RunOutputCapBytes, 1 * mib},
	// docs/limits.md: a tool's text at its default bounds, well under
	// claude.ai's cut at about 150,000 characters.
	"MaxToolTextChars": {MaxToolTextChars, 100_000},
	"MaxFrameBytes":    {MaxFrameBytes, 16 * mib}, // README, Tools: one 16 MiB link frame
	// docs/limits.md: a relay request carries files.write's 8 MiB as base64.
	"MaxRelayRequestBytes": {MaxRelayRequestBytes, 16 * mib},
	// Internal: how far past it the relay looks for the call to refuse.
	"MaxRelayOversizeScan": {MaxRelayOversizeScan, 64 * mib},
	"MaxServers":           {MaxServers, 16}, // docs/limits.md: the servers of an agent
	// docs/limits.md: secret prompts waiting for a person, per client token.
	"SecretPromptsPerToken": {SecretPromptsPerToken, 8},
	"OAuthMaxRedirectURIs":  {OAuthMaxRedirectURIs, 16},
	"OAuthMaxFormBytes":     {OAuthMaxFormBytes, 64 << 10},
	"OAuthPendingPerSource": {OAuthPendingPerSource, 16},
	"OAuthPendingPerClient": {OAuthPendingPerClient, 64},
	"OAuthPendingMax":       {OAuthPendingMax, 1024},
	"OAuthStateMaxBytes":    {OAuthStateMaxBytes, 1024},
	"OAuthUnusedClientsMax": {OAuthUnusedClientsMax, 4096},
	"CIMDMaxBytes":          {CIMDMaxBytes, 64 << 10},
	"CIMDCacheEntries":      {CIMDCacheEntries, 256},
	// Internal: an eighth of the relay's unauthenticated requests.
	"CIMDMaxFetching": {CIMDMaxFetching, 8},
	// Internal: a quarter of CIMDMaxFetching, so one slow host leaves the
	// rest to others.
	"CIMDMaxFetchingPerHost": {CIMDMaxFetchingPerHost, 2},
	// Internal: failures of that many distinct URLs within CIMDFailureTTL.
	"CIMDFailureEntries": {CIMDFailureEntries, 1024},
	// Internal: the relay's grants are about 400 bytes.
	"MaxGrantBytes": {MaxGrantBytes, 2048},
	// Internal: a grant lives 120 s, so this admits over 800 calls a second.
	"MaxGrantsRemembered": {MaxGrantsRemembered, 100_000},
	// Internal: a quarter of them, so no one principal fills the memory.
	"MaxGrantsRememberedPerPrincipal": {MaxGrantsRememberedPerPrincipal, 25_000},
	// Internal: 8 KiB of bits per relay process; no call in flight is
	// overtaken by 65,536 others.
	"GrantSequenceWindow": {GrantSequenceWindow, 65_536},
	// Internal: relay processes whose grants live at once (replicas and
	// their restarts within two minutes).
	"MaxGrantMinters": {MaxGrantMinters, 64},
	// Internal: the owner's permissions.json, bounded like job-resources.json.
	"MaxPermissionsBytes": {MaxPermissionsBytes, 64 * kib},
	"JournalMaxEntries":   {JournalMaxEntries, 10_000}, // README, What is here: the newest 10,000 entries
	"AuditMaxEntries":     {AuditMaxEntries, 100_000},  // README, The relay and the link: 100,000
	// Internal: a source refused every minute of 69 days, or 100,000 sources in one minute.
	"AuditMaxRefusalRows": {AuditMaxRefusalRows, 100_000},
	// Internal: the sources refused while one audit write is under way.
	"AuditPendingRefusalSources": {AuditPendingRefusalSources, 4096},
	// Internal: too long to guess over the network (`openssl rand -hex 16` prints 32).
	"MetricsTokenMinBytes": {MetricsTokenMinBytes, 16},
	"MaxEnvEntryBytes":     {MaxEnvEntryBytes, 128*kib - 1}, // exec's 128 KiB, which counts the NUL
	// Internal: room for a 1 MiB environment.
	"MaxEnvelopeBytes": {MaxEnvelopeBytes, 8 * mib},
	// Internal: the owner's job-resources.json is a few bytes.
	"MaxJobResourcesBytes": {MaxJobResourcesBytes, 64 * kib},
	// README, Managed jobs: nice 0–19, cpu_weight 1–10000 (the kernel's and
	// systemd's ranges).
	"JobNiceMax":      {JobNiceMax, 19},
	"JobNiceDefault":  {JobNiceDefault, 19},
	"JobCPUWeightMin": {JobCPUWeightMin, 1},
	"JobCPUWeightMax": {JobCPUWeightMax, 10000},
	// Internal: any job metadata file read from disk.
	"MaxMetadataBytes": {MaxMetadataBytes, 1 * mib},
	// docs/tools.md process.wait: process_ids 1–32; docs/limits.md.
	"WaitMaxJobs": {WaitMaxJobs, 32},
	// docs/tools.md process.wait and process.input: until texts up to 1 KiB, probes 10 times a second.
	"UntilTextMaxBytes": {UntilTextMaxBytes, 1 * kib},
	// docs/tools.md process.wait: met output's line, at most 200 bytes around the text.
	"UntilLineMaxBytes": {UntilLineMaxBytes, 200},
	// docs/tools.md process.screen: rows past 64 KiB of text are left empty; docs/limits.md
	// the emulator's feed (64 KiB at most every 50 ms, else the last 32 KiB).
	"ScreenTextMaxBytes": {ScreenTextMaxBytes, 64 * kib},
	"ScreenFloodBytes":   {ScreenFloodBytes, 64 * kib},
	"ScreenResyncBytes":  {ScreenResyncBytes, 32 * kib},
	// docs/tools.md process.start: idempotency_key 1-128 printable ASCII.
	"IdempotencyKeyMaxBytes": {IdempotencyKeyMaxBytes, 128},
	// docs/tools.md files.read: max_bytes default 64 KiB, at most 1 MiB; docs/limits.md 1 MiB / 8 MiB.
	"FileReadDefault": {FileReadDefault, 64 * kib},
	"FileReadMax":     {FileReadMax, 1 * mib},
	"FileWriteMax":    {FileWriteMax, 8 * mib},
	// docs/tools.md files.edit: 1–100 edits, diff bounded to 64 KiB.
	"FileEditMaxEdits": {FileEditMaxEdits, 100},
	"FileEditDiffMax":  {FileEditDiffMax, 64 * kib},
	// Internal: room for the 10 MiB file of the edit benchmark, and more.
	"FileEditMaxBytes":       {FileEditMaxBytes, 64 * mib},
	"FileHashMaxBytes":       {FileHashMaxBytes, 64 * mib},
	"FileEditNearMatchSteps": {FileEditNearMatchSteps, 4 << 20},
	// Internal: a page of a terminal's ps -ww line; 200 processes stay under 1 MiB.
	"ProcessArgsMaxBytes": {ProcessArgsMaxBytes, 4 * kib},
	// docs/tools.md files.list: depth 1–10 (default 1), max_entries default 200,
	// at most 10000.
	"FileListDepthDefault":   {FileListDepthDefault, 1},
	"FileListDepthMax":       {FileListDepthMax, 10},
	"FileListEntriesDefault": {FileListEntriesDefault, 200},
	"FileListEntriesMax":     {FileListEntriesMax, 10000},
	// Internal: files.search's bound on exclude_dirs.
	"FileListMaxExcludeDirs": {FileListMaxExcludeDirs, 256},
	// docs/panel.md: an admin may keep 16 passkeys.
	"PasskeysPerAdmin": {PasskeysPerAdmin, 16},
	// Internal: a sign-in under way and a stored passkey.
	"MaxSignInStateBytes": {MaxSignInStateBytes, 4 * kib},
	"MaxPasskeyBytes":     {MaxPasskeyBytes, 16 * kib},
	// docs/limits.md, Downloads: what a relay serves for install.sh.
	"DownloadsMaxFiles":     {DownloadsMaxFiles, 64},
	"DownloadsMaxSumsBytes": {DownloadsMaxSumsBytes, 16 * kib},
	"DownloadNameMaxBytes":  {DownloadNameMaxBytes, 128},
	"DownloadsConcurrent":   {DownloadsConcurrent, 16},
}

// durations pins every time bound the same way.
var durations = map[string]struct{ got, want time.Duration }{
	"UpdateLinkWait": {UpdateLinkWait, 60 * time.Second}, // the contract: a new agent not linked within 60 s is rolled back
	// Internal: a binary over a slow link.
	"UpdateFetchTimeout":   {UpdateFetchTimeout, 5 * time.Minute},
	"TerminalJobRetention": {TerminalJobRetention, 7 * day}, // README, Managed jobs: 7 days
	"MaxWait":              {MaxWait, 30 * time.Second},     // process.output's schema: wait_ms 0-30000
	// Internal: captured output is visible to readers within 1 ms, far
	// below the 20 ms at which the agent re-reads a live capture.
	"CapturePublishInterval": {CapturePublishInterval, time.Millisecond},
	"RunTimeoutDefault":      {RunTimeoutDefault, 60 * time.Second}, // process.run's schema: default 60000
	"RunTimeoutMax":          {RunTimeoutMax, 600 * time.Second},    // process.run's schema: 1-600000
	"ForwardTimeout":         {ForwardTimeout, 11 * time.Minute},    // README: a silent device's call ends after 11 min
	"RelayCallWait":          {RelayCallWait, 240 * time.Second},    // claude.ai ends a tool call after 300 s
	"SendTimeout":            {SendTimeout, 15 * time.Second},       // README, The relay and the link: 15 s
	"SilenceTimeout":         {SilenceTimeout, 45 * time.Second},    // README, The relay and the link: 45 s
	// Internal: three heartbeats fit in one 45 s silence timeout.
	"HeartbeatInterval": {HeartbeatInterval, 15 * time.Second},
	// Internal: the agent's reconnect backoff.
	"ReconnectMin":         {ReconnectMin, 1 * time.Second},
	"ReconnectMax":         {ReconnectMax, 60 * time.Second},
	"ReplicaBeat":          {ReplicaBeat, 2 * time.Second},            // README, Several relays: every 2 s
	"ReplicaTTL":           {ReplicaTTL, 10 * time.Second},            // README, Several relays: gone after 10 s
	"GrantTTL":             {GrantTTL, 60 * time.Second},              // README, The relay and the link: 60 s
	"GrantClockSkew":       {GrantClockSkew, 30 * time.Second},        // Internal: relay and device clocks may differ this much
	"EnrollCodeTTL":        {EnrollCodeTTL, 15 * time.Minute},         // README, The relay and the link: valid 15 minutes
	"SignInCodeTTL":        {SignInCodeTTL, 15 * time.Minute},         // docs/panel.md: a sign-in code is valid 15 min, once
	"PanelSessionIdle":     {PanelSessionIdle, 12 * time.Hour},        // docs/panel.md: a session ends after 12 h unused
	"PanelSessionMax":      {PanelSessionMax, 7 * day},                // docs/panel.md: and 7 days after sign-in
	"SignInStateTTL":       {SignInStateTTL, 10 * time.Minute},        // docs/panel.md: an SSO or passkey sign-in must finish within 10 min
	"PanelLiveRecheck":     {PanelLiveRecheck, 4 * time.Second},       // docs/panel.md: an open live page ends within 5 s of its session
	"SecretPromptTTL":      {SecretPromptTTL, 10 * time.Minute},       // docs/panel.md: a secret prompt is valid for 10 minutes
	"OAuthAccessTTL":       {OAuthAccessTTL, time.Hour},               // docs/oauth.md: access tokens live 1 h
	"OAuthConnectionTTL":   {OAuthConnectionTTL, 30 * 24 * time.Hour}, // docs/oauth.md: a connection lasts 30 days by default
	"OAuthConnectionMax":   {OAuthConnectionMax, 365 * 24 * time.Hour},
	"OAuthCodeTTL":         {OAuthCodeTTL, 60 * time.Second}, // docs/oauth.md: a code is valid 60 s, once
	"OAuthRequestTTL":      {OAuthRequestTTL, 10 * time.Minute},
	"OAuthRefreshGrace":    {OAuthRefreshGrace, 30 * time.Second},
	"OAuthUnusedClientTTL": {OAuthUnusedClientTTL, 24 * time.Hour},
	"CIMDTimeout":          {CIMDTimeout, 5 * time.Second},
	"CIMDCacheTTL":         {CIMDCacheTTL, time.Hour},
	"CIMDConnectTimeout":   {CIMDConnectTimeout, 2 * time.Second},         // docs/oauth.md: connected within 2 s
	"CIMDFailureTTL":       {CIMDFailureTTL, 30 * time.Second},            // docs/oauth.md: a failure is kept 30 s
	"UntilProbeInterval":   {UntilProbeInterval, 100 * time.Millisecond},  // docs/tools.md process.wait: port and path looked for 10 times a second
	"ScreenFollowInterval": {ScreenFollowInterval, 50 * time.Millisecond}, // docs/limits.md: a pty job's emulator is fed every 50 ms
	"ClientTokenTTL":       {ClientTokenTTL, 30 * day},                    // README, The relay and the link: valid 30 days
	"StopEscalation":       {StopEscalation, 3 * time.Second},             // README, Managed jobs: SIGKILL after 3 s
	"JobTimeoutMax":        {JobTimeoutMax, 2592000 * time.Second},        // docs/tools.md process.start: timeout_s 1-2592000
	// Internal: the unit's RuntimeMaxSec is the limit + 3 s escalation + this.
	"TimeoutBackstopMargin": {TimeoutBackstopMargin, 5 * time.Second},
	"MaxInputBytes":         {MaxInputBytes, 65536},       // docs/limits.md: input per process.input call 64 KiB
	"TerminalDimensionMax":  {TerminalDimensionMax, 1000}, // docs/tools.md process.start: pty cols, rows 1-1000 each
	"SecretPromptMaxBytes":  {SecretPromptMaxBytes, 512},  // docs/limits.md: process.input's secret_prompt 512 bytes
	"SecretMaxBytes":        {SecretMaxBytes, 4095},       // docs/limits.md: a secret is one terminal line
	"SecretsPerJob":         {SecretsPerJob, 32},          // docs/limits.md: secrets a job masks
	// Internal: a job that does not read its stdin, and a frozen peer on the input channel.
	"InputWriteTimeout":    {InputWriteTimeout, 5 * time.Second},
	"InputExchangeTimeout": {InputExchangeTimeout, 10 * time.Second},
	// Internal: an answer in parts (a terminal's echo, then the result) comes back whole.
	"InputQuietPeriod": {InputQuietPeriod, 100 * time.Millisecond},
	"JournalMaxAge":    {JournalMaxAge, 30 * day},          // README, What is here: of the last 30 days
	"AuditMaxAge":      {AuditMaxAge, 90 * day},            // README, The relay and the link: 90 days
	"GPUProbeTimeout":  {GPUProbeTimeout, 2 * time.Second}, // system.metrics' schema: bounded to 2 s
	// Internal: room for 32 jobs' changes (two for a terminal job) at one per 100 ms, machine-wide.
	"SpareIdle":          {SpareIdle, 10 * time.Minute},
	"SessionNiceTimeout": {SessionNiceTimeout, 10 * time.Second},
	// Internal: how long process.start waits for the supervisor's claim.
	"ClaimTimeout": {ClaimTimeout, 10 * time.Second},
	// docs/tools.md process.wait: timeout_ms 0–600000, default 60000, progress
	// at least every 10 s; docs/limits.md: 600 s, 10 s.
	"WaitTimeoutDefault": {WaitTimeoutDefault, 60 * time.Second},
	"WaitTimeoutMax":     {WaitTimeoutMax, 600 * time.Second},
	"WaitProgressMaxGap": {WaitProgressMaxGap, 10 * time.Second},
	// Internal: 2 s below the bound, for a late timer or a busy link.
	"WaitProgressPeriod": {WaitProgressPeriod, 8 * time.Second},
}

// declared returns the name of every constant limits.go declares.
func declared(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "limits.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, decl := range f.Decls {
		if gen, ok := decl.(*ast.GenDecl); ok && gen.Tok == token.CONST {
			for _, spec := range gen.Specs {
				for _, name := range spec.(*ast.ValueSpec).Names {
					names = append(names, name.Name)
				}
			}
		}
	}
	return names
}

// TestBoundsPinned checks every bound against its contract value, and
// fails when limits.go declares a bound without a row in counts or
// durations.
func TestBoundsPinned(t *testing.T) {
	names := declared(t)
	if len(names) == 0 {
		t.Fatal("no constants found in limits.go")
	}
	seen := map[string]bool{}
	for _, name := range names {
		seen[name] = true
		c, isCount := counts[name]
		d, isDuration := durations[name]
		switch {
		case isCount && c.got != c.want:
			t.Errorf("limits.%s = %d, the contract says %d", name, c.got, c.want)
		case isDuration && d.got != d.want:
			t.Errorf("limits.%s = %v, the contract says %v", name, d.got, d.want)
		case !isCount && !isDuration:
			t.Errorf("limits.%s has no row in TestBoundsPinned's tables: add it with the value the README or a schema gives it", name)
		}
	}
	for name := range counts {
		if !seen[name] {
			t.Errorf("counts names limits.%s, which limits.go does not declare", name)
		}
	}
	for name := range durations {
		if !seen[name] {
			t.Errorf("durations names limits.%s, which limits.go does not declare", name)
		}
	}
}

// TestDerivedBoundsHold: the relations the comments in limits.go rely on.
func TestDerivedBoundsHold(t *testing.T) {
	if CaptureHeadBytes+CaptureTailBytes != 1*mib {
		t.Error("retained output per stream is not 1 MiB (README, Managed jobs)")
	}
	if 3*HeartbeatInterval > SilenceTimeout {
		t.Error("three heartbeats do not fit in one silence timeout")
	}
	if WaitProgressPeriod >= WaitProgressMaxGap {
		t.Error("process.wait's progress period does not keep gaps below the bound")
	}
	if WaitTimeoutMax >= ForwardTimeout {
		t.Error("the relay would cut off a process.wait of the longest timeout")
	}
	if life := GrantTTL + 2*GrantClockSkew; MaxGrantsRemembered/int(life/time.Second) < 800 {
		t.Error("the replay memory admits fewer than 800 calls a second")
	}
	if life := GrantTTL + 2*GrantClockSkew; MaxGrantsRememberedPerPrincipal/int(life/time.Second) < 200 {
		t.Error("the replay memory admits fewer than 200 calls a second of one principal")
	}
	if MaxGrantsRememberedPerPrincipal*4 > MaxGrantsRemembered {
		t.Error("fewer than four principals fill the replay memory")
	}
}
