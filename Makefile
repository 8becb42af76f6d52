# CommandCore. `make test` is what CI runs; `make run` starts the tools locally.
GO        ?= go
BIN       := bin/commandcore
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -X github.com/commandcore/commandcore/internal/version.Version=$(VERSION) \
             -X github.com/commandcore/commandcore/internal/version.Commit=$(COMMIT)
USERMGR   := $(GO) run ./internal/systemdtest/cmd/usermgr
# Iterations, not seconds: a duration-bounded fuzz run can fail spuriously
# with "context deadline exceeded" when time runs out mid-input.
FUZZTIME  ?= 10000x
# Every fuzz target, as package:Target.
FUZZ      := ./internal/jsonspan:FuzzObject ./internal/relay:FuzzReadDirect ./internal/relay:FuzzTake ./internal/envelope:FuzzDecode ./internal/jobresources:FuzzDecode \
             ./internal/jobmeta:FuzzDecodeJob ./internal/jobmeta:FuzzDecodeClaim \
             ./internal/jobmeta:FuzzDecodeResult ./internal/jobmeta:FuzzDecodeScreen ./internal/capture:FuzzReadMeta \
             ./internal/capture:FuzzReadPage ./internal/tools:FuzzDecodeArguments \
             ./internal/status:FuzzDecodeRuntime ./internal/activity:FuzzEventSanitize \
             ./internal/enrollment:FuzzDecode ./internal/authz:FuzzDecode \
             ./internal/authz:FuzzVerify ./internal/authz:FuzzParse \
             ./internal/relay/store:FuzzAuthToken ./internal/relay/store:FuzzDecodeAudit \
             ./internal/transport:FuzzInbound ./internal/transport:FuzzDecodeRotate \
             ./internal/transport:FuzzReadLinkFrame \
             ./internal/relay:FuzzSplitDevice ./internal/relay:FuzzBoundWait ./internal/enrollment:FuzzDecodeEnrollRequest \
             ./internal/enrollment:FuzzDecodeEnrollResponse ./internal/relay:FuzzSourceKey \
             ./internal/toolspec:FuzzParse ./internal/strictjson:FuzzDecode \
             ./internal/relay/oauth:FuzzParseForm ./internal/relay/oauth:FuzzDecodeRegistration \
             ./internal/relay/oauth/cimd:FuzzDecode ./internal/relay/oauth/cimd:FuzzCheckAddress \
             ./internal/jobinput:FuzzReadRequest ./internal/jobinput:FuzzReadReply \
             ./internal/install:FuzzParseExecStart \
             ./internal/fileops:FuzzReadWindow ./internal/fileops:FuzzApplyEdits \
             ./internal/fileops:FuzzDiff ./internal/proclist:FuzzFormatArgs \
             ./internal/procid:FuzzParseStat ./internal/mcpwire:FuzzEncode ./internal/uuidtext:FuzzShapes \
             ./internal/toolpath:FuzzParentResolvesAsTheKernel ./internal/relay/cluster:FuzzOpen ./internal/relay:FuzzScanCall ./internal/secretmask:FuzzMask \
             ./internal/selfupdate:FuzzCompare ./internal/transport:FuzzDecodeOffer \
             ./internal/relay/panel:FuzzResourceDevice ./internal/relay/panel:FuzzAfterSignIn \
             ./internal/relay/downloads:FuzzParseSums ./internal/relay/downloads:FuzzValidName \
             ./internal/relay/signin:FuzzParseRules ./internal/relay/signin:FuzzAdminName \
             ./internal/relay/signin:FuzzFinishPasskey
# nfpm runs as a tool, not a module dependency; v2.45.2 is the newest whose
# dependencies the module proxy serves.
NFPM      ?= $(GO) run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
# gremlins runs as a tool too, for `make mutation`.
GREMLINS  ?= $(GO) run github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0
# The core packages whose mutation score `make mutation` prints; of the
# transport, its framing (frame.go) only.
MUTATION  := internal/capture internal/envelope internal/jobresources \
             internal/authz internal/reconcile internal/jobstore \
             internal/errcode internal/limits internal/transport \
             internal/fileops internal/jsonspan internal/jobinput internal/toolpath \
             internal/relay/cluster internal/relay/panel internal/termscreen internal/listening \
             internal/secretmask internal/terminal internal/relay/oauth internal/relay/oauth/cimd \
             internal/selfupdate internal/relay/downloads internal/relay/updates \
             internal/relay/signin internal/procid internal/eintr internal/isolation

.PHONY: build test fuzz vet generate docs run run-cluster bench clean package package-test release vm-test vm-storm inspector-test ts-client-test claude-code-test conformance mutation screenshots

# Static and cgo-free: the supervisor starts once per job, and a
# dynamically linked binary costs it libc's pages and faults.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/commandcore

vet:
	scripts/no-binaries.sh
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }

# Every generated file: the relay's tool table and docs/tools.md from the
# live tool registrations, the packaged user unit from the installer's; a
# test fails when one is stale.
generate:
	$(GO) generate ./...

docs: generate

# The tests run against a real systemd user manager, booted here for the
# current user and shut down afterwards (see internal/systemdtest).
test: vet
	$(USERMGR) up
	$(GO) test -race -count=1 -timeout 15m ./... ; rc=$$?; $(USERMGR) down; exit $$rc
	$(MAKE) fuzz

fuzz:
	@for t in $(FUZZ); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	done

# Builds the binary, makes sure a systemd user manager is reachable, and
# starts a relay and an enrolled agent on loopback with their state in
# RUN_DIR, kept between runs (FRESH=1 starts over); prints the MCP URL and a
# client token, and stops both when either dies (scripts/run-local.sh).
RUN_DIR   ?= $(CURDIR)/.run
run: build
	@$(USERMGR) up >/dev/null
	@eval "$$($(USERMGR) env)"; RUN_DIR='$(RUN_DIR)' FRESH='$(FRESH)' LISTEN='$(LISTEN)' exec scripts/run-local.sh $(CURDIR)/$(BIN)

# Opt-in: the relay as three replicas on PostgreSQL and NATS, on loopback,
# with an agent linked through them (scripts/run-cluster.sh).
run-cluster: build
	$(GO) build -o bin/nats-server github.com/nats-io/nats-server/v2
	@$(USERMGR) up >/dev/null
	@eval "$$($(USERMGR) env)"; RUN_DIR='$(RUN_DIR)/cluster' exec scripts/run-cluster.sh $(CURDIR)/$(BIN) $(CURDIR)/bin/nats-server

# Mutation testing of the core packages (scripts/mutation.sh): each
# package's caught/total mutants. Not part of CI: it takes many minutes.
mutation:
	@$(USERMGR) up >/dev/null
	GO='$(GO)' GREMLINS='$(GREMLINS)' PKGS='$(MUTATION)' \
	CONSTS='internal/limits:limits.go internal/errcode:errcode.go' \
	EXCLUDE='internal/transport:^(backoff|close|conn|credentials|dial|heartbeat|queue|rotate)\.go$$' scripts/mutation.sh

# The headline benchmarks (launch latency, capture throughput, supervisor
# memory) and their summary; about a minute (bench/run.sh).
bench:
	bench/run.sh

# dist/: a .deb and an .rpm with a static binary, the user unit and the docs.
package:
	rm -rf dist
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o dist/commandcore ./cmd/commandcore
	BIN=dist/commandcore VERSION='$(VERSION)' NFPM='$(NFPM)' GO='$(GO)' packaging/package.sh

# dist/ as a relay serves it (relay serve --downloads dist): static
# binaries for linux/amd64 and linux/arm64, the .deb and .rpm of each and
# SHA256SUMS; the same tree and VERSION=X.Y.Z give the same bytes
# (packaging/release.sh).
release:
	VERSION='$(VERSION)' COMMIT='$(COMMIT)' NFPM='$(NFPM)' GO='$(GO)' packaging/release.sh

# Installs the .deb with dpkg, checks it and purges it (root on Debian; CI's
# disposable machine).
package-test: package
	packaging/test-deb.sh

# What this host cannot show, on a disposable systemd VM (qemu/TCG): a real
# cgroup OOM kill (workload_oom) and real reboots, orderly and abrupt
# (host_rebooted). Root only; the first run builds and caches a Debian
# image (~5 min), later runs take ~90 s. Not part of CI: it depends on a
# Debian mirror and takes minutes.
vm-test:
	test/vm/run.sh

# A benchmark on the same VM (cgroup v2, cpu delegated): process.output under
# an output storm, main's build against this tree's, in one boot (~5-7 min;
# BENCHMARKS.md "Jobs in one slice"). Needs the image vm-test caches.
vm-storm:
	test/vm/storm.sh

# Redraws docs/panel/*.png: the panel's browser tests (headless Chromium)
# write a screenshot of every page, the OAuth consent page's included.
screenshots:
	@$(USERMGR) up >/dev/null
	@eval "$$($(USERMGR) env)"; COMMANDCORE_SCREENSHOTS=$(CURDIR)/docs/panel $(GO) test ./internal/e2e -run '^(TestPanelInABrowser|TestConsentInABrowser)$$' -count=1

clean:
	rm -rf bin dist

# Opt-in: the official MCP TypeScript SDK client (Node, from the npm
# registry) calls every tool over stdio; it validates each result, failures
# included, against the tool's outputSchema; then its OAuth client connects
# to a device through the relay, the person allowing it in Chromium.
ts-client-test: build
	@$(USERMGR) up >/dev/null
	cd test/tsclient && { [ -d node_modules ] || npm install --no-audit --no-fund >/dev/null; }
	@eval "$$($(USERMGR) env)"; node test/tsclient/check.mjs $(CURDIR)/$(BIN)
	@eval "$$($(USERMGR) env)"; COMMANDCORE_TSCLIENT=1 $(GO) test -count=1 -run '^TestTypeScriptSDKOAuthClient$$' ./internal/e2e

# Opt-in: the official MCP Inspector CLI (Node, from the npm registry)
# against the relay and the stdio server.
inspector-test: build
	@$(USERMGR) up >/dev/null
	@eval "$$($(USERMGR) env)"; test/inspector/run.sh $(CURDIR)/$(BIN)

# Opt-in: Claude Code 2.1.328 (npm) checks the relay as make run sets it up:
# without a header it needs authentication (OAuth discovered), with the
# static token's header it is connected.
claude-code-test: build
	@$(USERMGR) up >/dev/null
	@eval "$$($(USERMGR) env)"; test/claudecode/run.sh $(CURDIR)/$(BIN)

# Opt-in: the official MCP conformance suite (0.2.0-alpha.12 and a Node 22
# binary, from the npm registry) against the relay with an enrolled agent:
# the server requirement sets of protocol revisions 2025-11-25 and
# 2026-07-28 at a device's MCP URL, through a loopback proxy that adds the
# static token, and its authorization-server scenarios, the person
# approving in Chromium; prints every scenario's result (docs/oauth.md).
conformance:
	@$(USERMGR) up >/dev/null
	cd test/conformance && { [ -x node_modules/.bin/conformance ] || npm install --no-audit --no-fund >/dev/null; }
	@eval "$$($(USERMGR) env)"; COMMANDCORE_CONFORMANCE=1 $(GO) test -count=1 -v -timeout 15m -run '^TestConformanceSuite$$' ./internal/e2e
