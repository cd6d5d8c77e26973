# txretry — developer commands. `make test` is what README.md and CI run.
GO ?= go
RACE ?= -race
# Nested modules: each has its own go.mod so that library users never get
# their dependencies (testcontainers, OpenTelemetry, sqlx, GORM, bun) in their module graph.
MODULES := $(patsubst %/go.mod,%,$(wildcard integration/go.mod examples/go.mod txretry/otelretry/go.mod txretry/sqlxretry/go.mod txretry/gormretry/go.mod txretry/bunretry/go.mod txretry/txretryvet/go.mod))

PG_DSN ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable
MYSQL_DSN ?= root@tcp(127.0.0.1:3306)/test

.PHONY: test unit modules integration lint demo bench env matrix

# The go test commands of make test, one per argument of testsum, run from
# integration/: the library's unit tests, then every nested module. txbench's
# end-to-end test (every workload, runner and driver at 1 and 2 processes)
# takes 7-8 minutes alone under -race on 2 cores: past go test's default
# 10-minute limit beside the other packages.
TEST_COMMANDS := "-C .. $(RACE) -count=1 -timeout 20m ./..." \
	$(foreach m,$(MODULES),"-C ../$(m) $(RACE) -count=1 -timeout 20m ./...")

## test: every module's tests with -race, on one PostgreSQL and one MySQL-family server shared by all
## (TXRETRY_PG_DSN / TXRETRY_MYSQL_DSN, else Docker, else throwaway servers from the installed
## binaries: integration/cmd/withdb), with the Galera cluster and PgBouncer of the engine tests;
## ends with "N passed, N failed, N skipped" and every skipped test's reason (integration/cmd/testsum)
test:
	GO=$(GO) $(GO) run -C integration ./cmd/withdb -cluster cluster -- \
		$(GO) run ./cmd/testsum $(TEST_COMMANDS)

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

## bench: retry policies side by side under contention (BENCHFLAGS="-workload hot -repeat 3 -tsv bench.tsv");
## servers as for make test: a server on a default port only through its DSN (make env prints the exports)
bench:
	$(GO) run -C integration ./cmd/withdb -- $(GO) run ./txbench $(BENCHFLAGS)

## env: print the DSN exports for the local servers of a development machine
env:
	@echo "export TXRETRY_PG_DSN='$(PG_DSN)'"
	@echo "export TXRETRY_MYSQL_DSN='$(MYSQL_DSN)'"

## matrix: the integration suite against each database version in containers (needs Docker)
PG_IMAGES ?= postgres:13-alpine postgres:14-alpine postgres:15-alpine postgres:16-alpine postgres:17-alpine
MYSQL_IMAGES ?= mysql:8.0 mysql:8.4 mariadb:10.6 mariadb:10.11 mariadb:11.4
matrix:
	@set -e; for pg in $(PG_IMAGES); do for my in $(MYSQL_IMAGES); do \
		echo "== $$pg + $$my"; \
		(cd integration && env -u TXRETRY_PG_DSN -u TXRETRY_MYSQL_DSN TXRETRY_PG_IMAGE=$$pg TXRETRY_MYSQL_IMAGE=$$my \
			$(GO) test $(RACE) -count=1 ./scenarios/ ./uncertain/); \
	done; done
