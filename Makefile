# txretry — developer commands. `make test` is what README.md runs, `make test-all` what CI runs.
GO ?= go
RACE ?= -race
# Nested modules: each has its own go.mod so that library users never get
# their dependencies (testcontainers, OpenTelemetry, sqlx, GORM, bun) in their module graph.
MODULES := $(patsubst %/go.mod,%,$(wildcard integration/go.mod examples/go.mod txretry/otelretry/go.mod txretry/sqlxretry/go.mod txretry/gormretry/go.mod txretry/bunretry/go.mod txretry/txretryvet/go.mod))

PG_DSN ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable
MYSQL_DSN ?= root@tcp(127.0.0.1:3306)/test

.PHONY: test test-all unit modules integration lint demo bench env matrix

# make test: every behaviour the README promises, on every driver against
# a real server, in about five minutes on two cores. make test-all (CI,
# .ci/run) adds what tests the harnesses and the long campaigns:
#
#   - integration/engines: the Galera cluster, PgBouncer and TiDB of
#     integration/cluster (withdb -cluster; a first run builds TiDB);
#   - LONG_TESTS, left out of make test by -skip: txbench's full matrix of
#     runners, workloads and drivers (make test keeps TestBenchSmoke) and
#     its chart's drawing (TestWriteChart, a PNG drawn under -race); the
#     outage tests of PgBouncer and of a failover (make test keeps the
#     restarts of PostgreSQL through pgxpool and pgx stdlib and of MariaDB),
#     and dbserver's tests of the standby and PgBouncer that only those use;
#     the throwaway servers' removal under signals, by dbserver and withdb
#     (make test keeps their removal at a normal end);
#   - TXRETRY_LONG=1: the long mode of the campaigns that have a short one
#     (the crash campaign: 30 kills per driver path instead of 10;
#     TestFaultsAtEveryStep: 50 trials per cell instead of one per step and
#     timing; TestCampaign: 200 trials per driver path and mode instead of
#     100; the fault proxy's TestPostgresFaults: 20 repetitions of each drop
#     fault instead of 5).
#
# testsum names what make test leaves out under "not selected", never as
# skipped tests.
LONG_TESTS := ^(TestBenchAllRunners|TestWriteChart|TestRestartPgBouncer|TestFailover|TestFailoverDuringCommit|TestPrivateStandbyPromote|TestPgBouncerStopStart|TestThrowawayGoneAfterSignal|TestThrowawayAfterKill|TestWithdbSIGTERM)$$
LONG_PACKAGES := /engines$$

# The go test commands, one per argument of testsum, run from integration/:
# the integration module first (the longest), then the library's unit tests
# and every other nested module. testsum runs TEST_JOBS of them at once, each
# with go test's -p (GOMAXPROCS test binaries at once): most tests wait on a
# server, not on a core. go test starts packages in the order given: the
# integration module's longest ones (SLOW_FIRST) first, so that none starts
# last and runs alone.
SLOW_FIRST := ./scenarios ./uncertain ./adapters ./outage ./dbserver ./crash ./txbench ./internal/faultproxy
TEST_JOBS ?= 3
OTHER_MODULES := $(filter-out integration,$(MODULES))
OTHER_COMMANDS := "-C .. $(RACE) -count=1 ./..." \
	$(foreach m,$(OTHER_MODULES),"-C ../$(m) $(RACE) -count=1 ./...")

## test: every module's tests with -race in about five minutes (the long ones: make test-all), on one
## PostgreSQL and one MySQL-family server shared by all (TXRETRY_PG_DSN / TXRETRY_MYSQL_DSN, else Docker,
## else throwaway servers from the installed binaries: integration/cmd/withdb); ends with
## "N passed, N failed, N skipped", every skipped test's reason and what was not selected (integration/cmd/testsum)
test:
	pkgs=$$(cd integration && $(GO) list $(SLOW_FIRST) ./... | grep -v '$(LONG_PACKAGES)') && \
	GO=$(GO) $(GO) run -C integration ./cmd/withdb -- \
		$(GO) run ./cmd/testsum -j $(TEST_JOBS) -all "make test-all" \
			-omit "github.com/txretry/txretry/integration/engines (Galera, PgBouncer, TiDB)" \
			-omit "the campaigns' long mode (TXRETRY_LONG=1): 30 crash kills per path, 50 trials per step cell, 200 per campaign path, 20 proxy drops" \
			"-C ../integration $(RACE) -count=1 -skip $(LONG_TESTS) $$pkgs" $(OTHER_COMMANDS)

## test-all: make test's tests plus the long ones (CI): the engine tests with the Galera cluster,
## PgBouncer and TiDB of integration/cluster (a first run builds TiDB, about five minutes), txbench's
## full matrix, every outage test, the campaigns' long mode (TXRETRY_LONG=1)
test-all:
	TXRETRY_LONG=1 GO=$(GO) $(GO) run -C integration ./cmd/withdb -cluster cluster -- \
		$(GO) run ./cmd/testsum -j $(TEST_JOBS) \
			"-C ../integration $(RACE) -count=1 -timeout 30m ./..." $(OTHER_COMMANDS)

## unit: the library's own unit tests (no database needed)
unit:
	$(GO) test $(RACE) -count=1 ./...

## modules: the nested modules' tests with plain go test; each test binary finds or starts its own servers
modules:
	@set -e; for m in $(MODULES); do echo "== $$m"; (cd $$m && $(GO) test $(RACE) -count=1 ./...); done

## integration: only the integration module
integration:
	cd integration && $(GO) test $(RACE) -count=1 ./...

## lint: gofmt and go vet over every module, then txretryvet (txretry/txretryvet) over the examples
## and the integration code (txbench included)
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) vet ./...); done
	@set -e; dir=$$(mktemp -d); trap 'rm -r "$$dir"' EXIT; \
		$(GO) build -C txretry/txretryvet -o "$$dir/txretryvet" ./cmd/txretryvet; \
		for m in examples integration; do echo "txretryvet $$m"; (cd $$m && $(GO) vet -vettool="$$dir/txretryvet" ./...); done

## generate: regenerate the repository example's sqlc code and its sum (needs sqlc v1.31.1 on PATH, or SQLC=/path/to/sqlc)
.PHONY: generate
generate:
	cd examples && $(GO) generate ./repository/...

## demo: concurrent SERIALIZABLE bank transfers on PostgreSQL and MySQL/MariaDB, with retries shown
demo:
	cd examples && $(GO) run ./bank

## bench: retry policies side by side under contention (BENCHFLAGS="-workload hot -repeat 3 -tsv bench.tsv"
## replaces the default flags below); servers as for make test: a server on a default port only through its
## DSN (make env prints the exports)
# bench's default: the mixed and TPC-C-like workloads, each with its classes as fn literals or labels and as
# unlabelled method values, for txretry with and without its contention manager and cenkalti, at 1 and 4
# processes: 96 runs of 3 s plus their setup (seeding: 1-5 s each on a loaded 2-core machine), about 10 minutes.
BENCHFLAGS ?= -workload mixed,mixed-mv,oltp,oltp-mv -runners txretry,txretry-nocm,cenkalti -procs 1,4 -duration 3s -repeat 2
bench:
	$(GO) run -C integration ./cmd/withdb -- $(GO) run ./txbench $(BENCHFLAGS)

## env: print the DSN exports for the local servers of a development machine
env:
	@echo "export TXRETRY_PG_DSN='$(PG_DSN)'"
	@echo "export TXRETRY_MYSQL_DSN='$(MYSQL_DSN)'"

## matrix: the scenario and uncertain-commit suites (MATRIX_PACKAGES) in containers (needs Docker), once per
## pair of images: the first of PG_IMAGES with the first of MYSQL_IMAGES, and so on; through withdb and testsum
## (under CI=true a skipped test fails). CI pairs the images of integration/cluster/images.sh.
PG_IMAGES ?= postgres:13-alpine postgres:14-alpine postgres:15-alpine postgres:16-alpine postgres:17-alpine
MYSQL_IMAGES ?= mysql:8.0 mysql:8.4 mariadb:10.6 mariadb:10.11 mariadb:11.4
MATRIX_PACKAGES ?= ./scenarios/ ./uncertain/
matrix:
	@set -- $(MYSQL_IMAGES); \
	if [ $$# -ne $(words $(PG_IMAGES)) ]; then echo "PG_IMAGES and MYSQL_IMAGES must name as many images" >&2; exit 2; fi; \
	failed=""; for pg in $(PG_IMAGES); do my=$$1; shift; \
		echo "== matrix: $$pg + $$my"; start=$$(date +%s); \
		if env -u TXRETRY_PG_DSN -u TXRETRY_MYSQL_DSN -u TXRETRY_MYSQL_FLAVOR \
			TXRETRY_PG_IMAGE=$$pg TXRETRY_MYSQL_IMAGE=$$my GO=$(GO) $(GO) run -C integration ./cmd/withdb -- \
			$(GO) run ./cmd/testsum "-C ../integration $(RACE) -count=1 -timeout 20m $(MATRIX_PACKAGES)"; \
		then echo "== matrix: $$pg + $$my passed in $$(($$(date +%s) - start))s"; \
		else echo "== matrix: $$pg + $$my FAILED in $$(($$(date +%s) - start))s"; failed="$$failed $$pg+$$my"; fi; \
	done; \
	if [ -n "$$failed" ]; then echo "== matrix failed:$$failed"; exit 1; fi
