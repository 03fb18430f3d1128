# Every target runs over the modules listed in go.work.
MODULES := $(shell go work edit -json | sed -n 's/.*"DiskPath": "\(.*\)".*/\1/p')
PACKAGES := $(addsuffix /...,$(MODULES))

# golangci-lint is pinned (the version the GitHub workflow runs too); `make
# lint` installs it into .bin/ when it is missing there.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(CURDIR)/.bin/golangci-lint-$(GOLANGCI_LINT_VERSION)

.PHONY: test check check-steps test-full test-allocs lint lint-tool bench tidy build-alone fmt redis-server

# The README's test command: every test of every module under the race
# detector, in one go test run so that packages of all modules share the
# CPUs; -short leaves out the long fault scenarios. The tests start their
# own redis-server processes (core/redistest).
test: redis-server
	go test -race -short -shuffle=on -count=1 $(PACKAGES)

# What CI runs (.ci/run): lint, every test with the long fault scenarios,
# the allocation tests without the race detector, and every module built
# on its own. .ci/run runs the same steps in turn (make check-steps lists
# them), to time each.
CHECK_STEPS := lint test-full test-allocs build-alone
check: $(CHECK_STEPS)

check-steps:
	@echo $(CHECK_STEPS)

# The Redis store's fault scenarios time decisions against a 50 ms
# deadline, and admin times changes reaching other replicas against
# 100 ms: they run after the other packages, one package at a time, so
# that no other package's tests take the CPUs from them. bench holds
# benchmarks only (make bench); lint's go vet compiles it. go test's own
# vet pass is off: lint vets every package, test files included.
ALONE := ./core/redisstore/... ./admin/...

test-full: redis-server
	go test -race -vet=off -shuffle=on -count=1 $(filter-out $(ALONE) ./bench/...,$(PACKAGES))
	go test -race -vet=off -shuffle=on -count=1 -p 1 $(ALONE)

# Allocation tests (testing.AllocsPerRun, or adaptertest's AllocsPerRun and
# CheckAllocs) skip under -race, which allocates on its own: the packages
# that have them run again, without it.
test-allocs:
	@pkgs=$$(go list -f '{{.ImportPath}} {{.Dir}}' $(PACKAGES) | while read -r pkg dir; do \
		if grep -qsE 'AllocsPerRun|CheckAllocs' "$$dir"/*_test.go; then echo "$$pkg"; fi; done); \
	echo "== allocation tests (no -race)"; go test -count=1 -run 'Alloc' $$pkgs

# gofmt, go vet and golangci-lint (configured by .golangci.yml) on every
# module. One golangci-lint run over the workspace loads the packages that
# modules share once, where a run per module loaded them again in each.
lint: $(GOLANGCI_LINT)
	@test -z "$$(gofmt -l $(MODULES))" || { echo "== gofmt -w these files:"; gofmt -l $(MODULES); exit 1; }
	go vet $(PACKAGES)
	$(GOLANGCI_LINT) run $(PACKAGES)

# lint-tool only installs golangci-lint, so that .ci/run can build it while
# apt-get installs what the tests need.
lint-tool: $(GOLANGCI_LINT)

$(GOLANGCI_LINT):
	@echo "== installing golangci-lint $(GOLANGCI_LINT_VERSION) into .bin/"
	@mkdir -p $(@D)
	GOWORK=off GOBIN=$(@D) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	@mv $(@D)/golangci-lint $@

# Installs redis-server (apt-get) where it is missing.
redis-server:
	@.ci/install-redis-server

# The benchmarks of docs/performance.md: interleaved passes, then benchstat
# (the Redis cases start a redis-server of their own).
bench: redis-server
	bench/run.sh

# Each module must build on its own, which catches a missing require.
build-alone:
	@set -e; for m in $(MODULES); do echo "== GOWORK=off build $$m"; (cd $$m && GOWORK=off go build -o /dev/null ./... && GOWORK=off go vet ./...); done

tidy:
	@set -e; for m in $(MODULES); do (cd $$m && GOWORK=off go mod tidy); done

fmt:
	gofmt -w $(MODULES)
