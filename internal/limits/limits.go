// Package limits holds every bound of the contract (and the few internal
// bounds derived from them) as named constants, so each lives in exactly one
// place; docs/limits.md lists them, and a test keeps it true.
package limits

import "time"

const (
	// MaxLiveJobs is the number of live (non-terminal) managed jobs admitted.
	MaxLiveJobs = 32
	// MaxRetainedTerminalJobs is how many terminal jobs are kept before pruning.
	MaxRetainedTerminalJobs = 100
	// TerminalJobRetention is how long a terminal job is kept at most.
	TerminalJobRetention = 7 * 24 * time.Hour

	// CaptureHeadBytes is the retained prefix of each output stream.
	CaptureHeadBytes = 512 << 10
	// CaptureTailBytes is the retained suffix of each output stream.
	CaptureTailBytes = 512 << 10
	// CaptureRingSlack is the most a capture writer stores past its
	// published header; the on-disk tail ring keeps this much slack so a
	// reader of the published window never sees a slot overwritten mid-read.
	// It is part of the capture file format.
	CaptureRingSlack = 64 << 10
	// CaptureReadBytes is the largest single read the supervisor takes from
	// a job's output (when it cannot splice the pipe into the file).
	CaptureReadBytes = 256 << 10
	// CapturePublishInterval bounds how long captured output may wait
	// before the capture header that makes it visible to readers is
	// published; a busy stream publishes every CaptureRingSlack bytes.
	CapturePublishInterval = time.Millisecond

	// OutputPageDefault and OutputPageMax bound process.output's max_bytes
	// per stream; by default both streams' pages together hold 64 KiB,
	// which keeps the result's text under MaxToolTextChars.
	OutputPageDefault = 32 << 10
	OutputPageMax     = 1 << 20
	// MaxWait bounds the wait_ms long poll of process.start and process.output.
	MaxWait = 30 * time.Second
	// WaitMaxJobs bounds process.wait's process_ids; WaitTimeoutDefault
	// and WaitTimeoutMax its timeout_ms.
	WaitMaxJobs        = 32
	WaitTimeoutDefault = 60 * time.Second
	WaitTimeoutMax     = 600 * time.Second
	// UntilTextMaxBytes bounds the literal text process.wait's
	// until.output and process.input's until look for.
	UntilTextMaxBytes = 1024
	// UntilLineMaxBytes bounds the line process.wait's met output shows
	// the text in: the text with the line around it, cut beyond.
	UntilLineMaxBytes = 200
	// UntilProbeInterval is how often process.wait looks for a listening
	// port or a path: a /proc/net read or a stat, never a busy loop.
	UntilProbeInterval = 100 * time.Millisecond
	// IdempotencyKeyMaxBytes bounds process.start's idempotency_key.
	IdempotencyKeyMaxBytes = 128
	// WaitProgressMaxGap is the longest process.wait goes without a
	// progress notification when the client gave a token; it sends one
	// every WaitProgressPeriod, early enough that a late scheduler or a
	// busy link does not stretch a gap past the bound.
	WaitProgressMaxGap = 10 * time.Second
	WaitProgressPeriod = 8 * time.Second

	// LiveChunkBytes and LiveQueueFrames bound live output on the link.
	LiveChunkBytes  = 8 << 10
	LiveQueueFrames = 64
	// RunOutputDefaultBytes and RunOutputCapBytes bound process.run's
	// max_bytes: the combined stdout+stderr output it retains for its
	// result, the first half in arrival order and the last half; the
	// middle is counted and streamed live, not retained.
	RunOutputDefaultBytes = 64 << 10
	RunOutputCapBytes     = 1 << 20
	// MaxToolTextChars bounds a tool result's text content at the tool's
	// default bounds: claude.ai cuts a result at about 150,000 characters.
	MaxToolTextChars = 100_000
	// RunTimeoutDefault and RunTimeoutMax bound process.run's timeout_ms.
	RunTimeoutDefault = 60 * time.Second
	RunTimeoutMax     = 10 * time.Minute
	// ForwardTimeout bounds a call the relay forwards to a device: above
	// the longest legitimate call (process.run's RunTimeoutMax, then its
	// stop escalation and result; process.wait's 600 s), so only a device
	// that never answers reaches it.
	ForwardTimeout = RunTimeoutMax + time.Minute
	// RelayCallWait bounds how long one call through the relay blocks by
	// default (relay serve --max-call-wait): claude.ai ends a tool call
	// after 300 s.
	RelayCallWait = 240 * time.Second
	// ReplicaBeat is how often a relay replica records that it is alive;
	// a replica not seen for ReplicaTTL is gone, and the links it held are
	// anyone's.
	ReplicaBeat = 2 * time.Second
	ReplicaTTL  = 5 * ReplicaBeat
	// SendTimeout and SilenceTimeout bound the WebSocket link.
	SendTimeout    = 15 * time.Second
	SilenceTimeout = 45 * time.Second
	// HeartbeatInterval is how often the server sends a heartbeat; three
	// fit in one silence timeout, so one lost heartbeat kills nothing.
	HeartbeatInterval = 15 * time.Second
	// MaxFrameBytes bounds one WebSocket message. A live chunk is 8 KiB,
	// but a tool result is larger: a process.output page of 1 MiB per
	// stream is about 5.4 MiB as base64 (the result carries the data both
	// as structured content and as its JSON text). A result past the bound
	// (text that JSON escapes heavily, a huge search) is answered with
	// result_too_large instead.
	MaxFrameBytes = 16 << 20
	// MaxRelayRequestBytes bounds one HTTP request to the relay's MCP
	// endpoint: what one link frame carries to the device, so the largest
	// tool input (files.write's 8 MiB, as base64) passes.
	MaxRelayRequestBytes = MaxFrameBytes
	// MaxRelayOversizeScan bounds how much of a request over
	// MaxRelayRequestBytes the relay reads to find the call it carries,
	// so that the call is answered as a failed tool call, not dropped.
	MaxRelayOversizeScan = 4 * MaxRelayRequestBytes
	// MaxServers bounds the servers (relay replicas) an agent is given.
	MaxServers = 16
	// ReconnectMin and ReconnectMax bound the agent's jittered backoff.
	ReconnectMin = 1 * time.Second
	ReconnectMax = 60 * time.Second

	// GrantTTL is how long a per-call grant is valid; GrantClockSkew is the
	// slack allowed between the relay's clock and the device's.
	GrantTTL       = 60 * time.Second
	GrantClockSkew = 30 * time.Second
	// MaxGrantBytes bounds an encoded grant.
	MaxGrantBytes = 2048
	// MaxGrantsRemembered bounds the used grant IDs an agent remembers to
	// refuse replays: a grant lives GrantTTL plus twice the skew (120 s),
	// so this admits over 800 calls a second.
	MaxGrantsRemembered = 100_000
	// MaxGrantsRememberedPerPrincipal bounds the part of them one principal
	// may hold, so that one client's flood of calls refuses only its own:
	// a quarter, over 200 calls a second, and the whole memory takes at
	// least four principals.
	MaxGrantsRememberedPerPrincipal = 25_000
	// GrantSequenceWindow is how many numbers below the highest an agent
	// tells used from unused, per relay process minting numbered grants
	// (8 KiB each): a grant overtaken by this many newer ones of its relay
	// is refused. MaxGrantMinters bounds those relay processes whose
	// grants live at once.
	GrantSequenceWindow = 65_536
	MaxGrantMinters     = 64
	// EnrollCodeTTL and ClientTokenTTL are the relay's default lifetimes.
	EnrollCodeTTL  = 15 * time.Minute
	ClientTokenTTL = 30 * 24 * time.Hour
	// SignInCodeTTL is how long a panel sign-in code is valid (once);
	// PanelSessionIdle ends a panel session unused that long, and
	// PanelSessionMax ends it that long after sign-in, however used.
	SignInCodeTTL    = 15 * time.Minute
	PanelSessionIdle = 12 * time.Hour
	PanelSessionMax  = 7 * 24 * time.Hour
	// SignInStateTTL is how long a sign-in under way (a trip to the
	// team's identity provider, a passkey prompt) may take to come back.
	SignInStateTTL = 10 * time.Minute
	// MaxSignInStateBytes bounds what a sign-in under way keeps.
	MaxSignInStateBytes = 4 * 1024
	// PasskeysPerAdmin bounds the passkeys one admin may register.
	PasskeysPerAdmin = 16
	// MaxPasskeyBytes bounds one stored passkey (its public key and what
	// the authenticator attested).
	MaxPasskeyBytes = 16 * 1024
	// PanelLiveRecheck is how often an open live page of the panel (a
	// job's tail, the device list) checks its session again, so that one
	// ended (signed out, expired, its admin revoked) stops within 5 s.
	PanelLiveRecheck = 4 * time.Second
	// SecretPromptTTL is how long a secret prompt's one-time panel page
	// takes the input, and so how long the asking call may wait for it.
	SecretPromptTTL = 10 * time.Minute
	// SecretPromptsPerToken bounds the secret prompts one client token
	// may have waiting for a person at once.
	SecretPromptsPerToken = 8
	// OAuthAccessTTL is an OAuth access token's lifetime; a connection
	// (its refresh tokens) lasts what the person chose at consent,
	// OAuthConnectionTTL unless they chose otherwise, at most
	// OAuthConnectionMax.
	OAuthAccessTTL     = time.Hour
	OAuthConnectionTTL = 30 * 24 * time.Hour
	OAuthConnectionMax = 365 * 24 * time.Hour
	// OAuthCodeTTL is how long an authorization code is valid (once);
	// OAuthRequestTTL how long a consent page waits for the person.
	OAuthCodeTTL    = 60 * time.Second
	OAuthRequestTTL = 10 * time.Minute
	// OAuthPendingPerSource, OAuthPendingPerClient and OAuthPendingMax
	// bound the authorization requests that wait for a person (each at
	// most OAuthRequestTTL): per source address (an IPv6 /64), per client,
	// in all. Unauthenticated, they must not grow the state without bound.
	OAuthPendingPerSource = 16
	OAuthPendingPerClient = 64
	OAuthPendingMax       = 1024
	// OAuthStateMaxBytes bounds an authorization request's state.
	OAuthStateMaxBytes = 1024
	// OAuthRefreshGrace is how long after its rotation a refresh token is
	// accepted once more, without revoking: a client that refreshed twice
	// at once, or retried after a lost answer, keeps its connection (the
	// OAuth 2.0 Security BCP allows it; Okta and Auth0 grant one).
	OAuthRefreshGrace = 30 * time.Second
	// OAuthUnusedClientTTL ends a dynamic registration no authorization
	// ever used, so a flood of registrations does not stay.
	OAuthUnusedClientTTL = 24 * time.Hour
	// OAuthUnusedClientsMax bounds the registrations no authorization has
	// used yet: past it, a new one waits for one to be used or to expire.
	OAuthUnusedClientsMax = 4096
	// OAuthMaxRedirectURIs bounds a client's redirect URIs;
	// OAuthMaxFormBytes an OAuth request's body (a registration, a token
	// request).
	OAuthMaxRedirectURIs = 16
	OAuthMaxFormBytes    = 64 << 10
	// CIMDMaxBytes and CIMDTimeout bound the fetch of a client ID
	// metadata document; CIMDCacheTTL and CIMDCacheEntries bound what is
	// kept of them.
	CIMDMaxBytes     = 64 << 10
	CIMDTimeout      = 5 * time.Second
	CIMDCacheTTL     = time.Hour
	CIMDCacheEntries = 256
	// CIMDMaxFetching bounds the client metadata documents being fetched
	// at once, so requests that name slow servers cannot hold many of the
	// relay's unauthenticated slots.
	CIMDMaxFetching = 8
	// CIMDMaxFetchingPerHost bounds the fetches at once from one host,
	// so a slow host holds a few of CIMDMaxFetching's slots, not all.
	CIMDMaxFetchingPerHost = 2
	// CIMDConnectTimeout bounds a fetch's TCP connection, and its TLS
	// handshake, within CIMDTimeout: a host that does not answer gives
	// its slot back soon.
	CIMDConnectTimeout = 2 * time.Second
	// CIMDFailureTTL is how long a failed fetch's error answers for its
	// URL without fetching again; CIMDFailureEntries bounds the failures
	// kept.
	CIMDFailureTTL     = 30 * time.Second
	CIMDFailureEntries = 1024
	// MaxPermissionsBytes bounds the owner's permissions.json.
	MaxPermissionsBytes = 64 << 10

	// StopEscalation is the delay between SIGTERM and SIGKILL on a stop request.
	StopEscalation = 3 * time.Second
	// JobTimeoutMax bounds process.start's timeout_s (1-2592000 s).
	JobTimeoutMax = 30 * 24 * time.Hour
	// TimeoutBackstopMargin is what a time-limited job's unit allows past
	// the limit and the stop escalation (RuntimeMaxSec) before systemd
	// stops it: room for the supervisor to reap, finish the capture
	// (1 s grace) and publish its record, so only a stuck supervisor meets it.
	TimeoutBackstopMargin = 5 * time.Second

	// MaxInputBytes bounds the data of one process.input call.
	MaxInputBytes = 64 << 10
	// SecretPromptMaxBytes bounds process.input's secret_prompt: a line
	// or two for a person to read at the relay's panel.
	SecretPromptMaxBytes = 512
	// SecretMaxBytes bounds one line of secret input (before its newline):
	// a terminal's line in canonical mode, 4095 bytes and the newline.
	SecretMaxBytes = 4095
	// SecretsPerJob bounds the secrets a job's supervisor keeps to mask in
	// its output; the next secret input is refused, never sent unmasked.
	SecretsPerJob = 32
	// TerminalDimensionMax bounds a pty job's cols and rows (1-1000 each).
	TerminalDimensionMax = 1000
	// ScreenTextMaxBytes bounds the text of one process.screen: rows past
	// it are left empty (truncated), so the screen file stays within
	// MaxMetadataBytes however its text is escaped, and the result's text,
	// a line more per row, under MaxToolTextChars.
	ScreenTextMaxBytes = 64 << 10
	// ScreenFollowInterval is how often a pty job's supervisor feeds its
	// terminal emulator what the job wrote since; ScreenFloodBytes is the
	// most it feeds at once: a job that wrote more since is fed only its
	// last ScreenResyncBytes, so an emulator (far slower than capture)
	// costs the supervisor a bounded share of a CPU, and a flood's final
	// screen is still drawn.
	ScreenFollowInterval = 50 * time.Millisecond
	ScreenFloodBytes     = 64 << 10
	ScreenResyncBytes    = 32 << 10
	// InputWriteTimeout is how long the supervisor waits for a job to take
	// input before answering with the bytes it accepted.
	InputWriteTimeout = 5 * time.Second
	// InputExchangeTimeout bounds one exchange on a job's input channel,
	// the supervisor's InputWriteTimeout included; a frozen peer holds the
	// channel no longer than this.
	InputExchangeTimeout = 10 * time.Second
	// InputQuietPeriod is how long output must pause, after a
	// process.input with wait_ms produced some, before the call returns it.
	InputQuietPeriod = 100 * time.Millisecond

	// JournalMaxEntries and JournalMaxAge bound the activity journal.
	JournalMaxEntries = 10000
	JournalMaxAge     = 30 * 24 * time.Hour
	// AuditMaxEntries and AuditMaxAge bound the relay's audit log.
	AuditMaxEntries = 100000
	AuditMaxAge     = 90 * 24 * time.Hour
	// AuditMaxRefusalRows bounds the relay's counts of requests refused
	// without a valid client token (one per source and minute), kept apart
	// from the entries and for AuditMaxAge too; AuditPendingRefusalSources
	// bounds the sources a relay counts in memory before it writes them,
	// past which further sources are counted together.
	AuditMaxRefusalRows        = 100000
	AuditPendingRefusalSources = 4096
	// MetricsTokenMinBytes is the shortest token `relay serve
	// --metrics-token` takes: a scrape off loopback must present it, so it
	// must resist guessing over the network.
	MetricsTokenMinBytes = 16

	// GPUProbeTimeout bounds the accelerator probe of system.metrics.
	GPUProbeTimeout = 2 * time.Second

	// MaxEnvEntryBytes bounds one KEY=VALUE string a request adds to the
	// environment: exec refuses a string past MAX_ARG_STRLEN (128 KiB,
	// which counts the string's trailing NUL).
	MaxEnvEntryBytes = 128<<10 - 1
	// MaxEnvelopeBytes bounds the private envelope a supervisor reads from
	// stdin; it leaves room for the 1 MiB environment the README promises.
	MaxEnvelopeBytes = 8 << 20
	// ClaimTimeout bounds how long process.start waits for the
	// supervisor's claim before the launch fails.
	ClaimTimeout = 10 * time.Second
	// MaxJobResourcesBytes bounds the owner's job-resources.json.
	MaxJobResourcesBytes = 64 << 10
	// JobNiceMax bounds the owner's nice for jobs (from 0: a job may be made
	// lower priority than the agent, never higher); the kernel's own maximum.
	JobNiceMax = 19
	// JobNiceDefault is a job's niceness when the owner's policy names none:
	// jobs are background work and yield the CPU to the agent and to the
	// machine's other sessions. On a host whose kernel shares CPU between
	// sessions (autogroups) and no cpu controller separates the jobs, this is
	// what keeps the agent answering while jobs write at full speed; a lone
	// job on an idle machine runs as fast (BENCHMARKS.md).
	JobNiceDefault = 19
	// JobCPUWeightMin and JobCPUWeightMax bound the owner's cpu_weight for
	// job units: the range of systemd's CPUWeight=.
	JobCPUWeightMin = 1
	JobCPUWeightMax = 10000
	// SpareIdle is how long a spare supervisor, started after a launch so
	// that the next job need not wait for a unit, waits for that job
	// before it is dismissed: an agent left alone keeps none waiting.
	SpareIdle = 10 * time.Minute
	// SessionNiceTimeout bounds how long a niced supervisor keeps retrying
	// to give its job's sessions its niceness (the kernel takes one such
	// change every 100 ms from an unprivileged user).
	SessionNiceTimeout = 10 * time.Second
	// MaxMetadataBytes bounds any job metadata file read from disk.
	MaxMetadataBytes = 1 << 20

	// FileReadDefault and FileReadMax bound files.read's max_bytes.
	FileReadDefault = 64 << 10
	FileReadMax     = 1 << 20
	// FileWriteMax bounds the content of one files.write (decoded).
	FileWriteMax = 8 << 20
	// FileEditMaxEdits bounds files.edit's edits.
	FileEditMaxEdits = 100
	// FileEditDiffMax bounds the unified diff a files.edit returns.
	FileEditDiffMax = 64 << 10
	// FileEditMaxBytes bounds the file files.edit holds in memory, before
	// and after the edits.
	FileEditMaxBytes = 64 << 20
	// FileHashMaxBytes is the largest file any call hashes (files.read's
	// sha256, expected_sha256, append's sha256): as large as files.edit
	// holds, the largest file whose hash another call can use. A read of a
	// larger file reads only its window, its sha256 null.
	FileHashMaxBytes = FileEditMaxBytes
	// FileEditNearMatchSteps bounds the line comparisons files.edit spends
	// looking for the text nearest a missing old_text.
	FileEditNearMatchSteps = 1 << 22
	// FileListDepthDefault and FileListDepthMax bound files.list's depth;
	// FileListEntriesDefault and FileListEntriesMax its max_entries: by
	// default as many entries of the longest names as keep the result's
	// text under MaxToolTextChars.
	FileListDepthDefault   = 1
	FileListDepthMax       = 10
	FileListEntriesDefault = 200
	FileListEntriesMax     = 10000
	// FileListMaxExcludeDirs bounds files.list's exclude_dirs, as
	// files.search bounds its own.
	FileListMaxExcludeDirs = 256

	// ProcessArgsMaxBytes bounds the arguments process.list shows for
	// one process (its command line joined by spaces, as ps prints it).
	ProcessArgsMaxBytes = 4 << 10

	// DownloadsMaxFiles bounds the files a relay serves for devices to
	// download: those its --downloads directory's SHA256SUMS names, and
	// its own binary.
	DownloadsMaxFiles = 64
	// DownloadsMaxSumsBytes bounds the SHA256SUMS a relay reads from its
	// --downloads directory: 64 lines of a hash and a longest name fit.
	DownloadsMaxSumsBytes = 16 << 10
	// DownloadNameMaxBytes bounds the name of a file a relay serves.
	DownloadNameMaxBytes = 128
	// DownloadsConcurrent bounds the downloads a relay serves at once;
	// beyond it, it answers 503. They do not count against the requests
	// waiting to present a credential.
	DownloadsConcurrent = 16
)

// Agent updates.
const (
	// UpdateMaxBytes bounds the binary an update downloads.
	UpdateMaxBytes = 256 << 20
	// UpdateFetchTimeout bounds the download of an update's binary.
	UpdateFetchTimeout = 5 * time.Minute
	// UpdateLinkWait is how long a new agent has to link before its
	// update's watchdog puts the previous binary back.
	UpdateLinkWait = 60 * time.Second
)
