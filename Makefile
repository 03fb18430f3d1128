# Every target runs over the modules listed in go.work.
MODULES := $(shell go work edit -json | sed -n 's/.*"DiskPath": "\(.*\)".*/\1/p')
GOTEST_FLAGS ?= -race -shuffle=on -count=1

.PHONY: test bench lint tidy build-alone fmt redis-server

# The tests start their own redis-server processes (internal/testredis) and
# need no Redis of yours; TOLLGATE_TEST_REDIS=host:port points the tests that
# can share one at a server you run.
test: redis-server
	@set -e; for m in $(MODULES); do echo "== test $$m"; (cd $$m && go test $(GOTEST_FLAGS) ./...); done

# The benchmarks of docs/performance.md: six interleaved passes, then
# benchstat (the Redis cases start a redis-server of their own).
bench: redis-server
	bench/run.sh

# Installs redis-server (apt-get) where it is missing.
redis-server:
	@.ci/install-redis-server

# golangci-lint (configured by .golangci.yml) runs too when it is installed:
# go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@latest
GOLANGCI_LINT ?= $(shell command -v golangci-lint 2>/dev/null || ls "$$(go env GOPATH)/bin/golangci-lint" 2>/dev/null)
lint:
	@set -e; test -z "$$(gofmt -l $(MODULES))" || { gofmt -l $(MODULES); exit 1; }
	@set -e; for m in $(MODULES); do echo "== vet $$m"; (cd $$m && go vet ./...); done
	@set -e; if [ -z "$(GOLANGCI_LINT)" ]; then echo "== golangci-lint is not installed: skipped"; \
	else for m in $(MODULES); do echo "== golangci-lint $$m"; (cd $$m && $(GOLANGCI_LINT) run ./...); done; fi

# Each module must build on its own, which catches a missing require.
build-alone:
	@set -e; for m in $(MODULES); do echo "== GOWORK=off build $$m"; (cd $$m && GOWORK=off go build -o /dev/null ./... && GOWORK=off go vet ./...); done

tidy:
	@set -e; for m in $(MODULES); do (cd $$m && GOWORK=off go mod tidy); done

fmt:
	gofmt -w $(MODULES)
