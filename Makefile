# Every target runs over the modules listed in go.work.
MODULES := $(shell go work edit -json | sed -n 's/.*"DiskPath": "\(.*\)".*/\1/p')
GOTEST_FLAGS ?= -race -shuffle=on -count=1

# golangci-lint is pinned (the version the GitHub workflow runs too). `make
# lint` installs it into .bin/ when it is missing there: go install builds
# it with the Go that lints, which golangci-lint needs to be at least as new
# as the code's go directive.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(CURDIR)/.bin/golangci-lint-$(GOLANGCI_LINT_VERSION)

.PHONY: test test-race test-allocs lint lint-tool bench tidy build-alone fmt redis-server

# What CI runs (.ci/run): lint, every module's tests under the race
# detector, then the packages with allocation tests without it. The tests
# start their own redis-server processes (internal/testredis) and need no
# Redis of yours; TOLLGATE_TEST_REDIS=host:port points the tests that can
# share one at a server you run.
test: lint test-race test-allocs

# Each loop goes through every module and then fails if any did, so that
# one failing module does not hide the others' results.
test-race: redis-server
	@failed=; for m in $(MODULES); do echo "== test $$m"; (cd $$m && go test $(GOTEST_FLAGS) ./...) || failed="$$failed $$m"; done; \
	test -z "$$failed" || { echo "== tests failed in:$$failed"; exit 1; }

# Allocation tests (testing.AllocsPerRun, or adaptertest's AllocsPerRun and
# CheckAllocs) skip under -race, which allocates on its own: the packages
# that have them run again, without it.
test-allocs:
	@set -e; for m in $(MODULES); do (cd $$m && \
		pkgs=$$(go list -f '{{.ImportPath}} {{.Dir}}' ./... | while read -r pkg dir; do \
			if grep -qsE 'AllocsPerRun|CheckAllocs' "$$dir"/*_test.go; then echo "$$pkg"; fi; done); \
		if [ -n "$$pkgs" ]; then echo "== allocs $$m (no -race)"; go test -count=1 $$pkgs; fi); done

# gofmt, go vet and golangci-lint (configured by .golangci.yml) on every
# module.
lint: $(GOLANGCI_LINT)
	@set -e; test -z "$$(gofmt -l $(MODULES))" || { echo "== gofmt -w these files:"; gofmt -l $(MODULES); exit 1; }
	@failed=; for m in $(MODULES); do echo "== vet $$m"; (cd $$m && go vet ./...) || failed="$$failed $$m"; done; \
	test -z "$$failed" || { echo "== go vet failed in:$$failed"; exit 1; }
	@failed=; for m in $(MODULES); do echo "== golangci-lint $$m"; (cd $$m && $(GOLANGCI_LINT) run ./...) || failed="$$failed $$m"; done; \
	test -z "$$failed" || { echo "== golangci-lint failed in:$$failed"; exit 1; }

# lint-tool only installs golangci-lint, so that .ci/run can build it while
# apt-get installs Chromium.
lint-tool: $(GOLANGCI_LINT)

$(GOLANGCI_LINT):
	@echo "== installing golangci-lint $(GOLANGCI_LINT_VERSION) into .bin/"
	@mkdir -p $(@D)
	GOWORK=off GOBIN=$(@D) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	@mv $(@D)/golangci-lint $@

# Installs redis-server (apt-get) where it is missing.
redis-server:
	@.ci/install-redis-server

# The benchmarks of docs/performance.md: six interleaved passes, then
# benchstat (the Redis cases start a redis-server of their own).
bench: redis-server
	bench/run.sh

# Each module must build on its own, which catches a missing require.
build-alone:
	@set -e; for m in $(MODULES); do echo "== GOWORK=off build $$m"; (cd $$m && GOWORK=off go build -o /dev/null ./... && GOWORK=off go vet ./...); done

tidy:
	@set -e; for m in $(MODULES); do (cd $$m && GOWORK=off go mod tidy); done

fmt:
	gofmt -w $(MODULES)
