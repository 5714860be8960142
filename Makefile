# The two commands a fresh machine needs (Python >= 3.10 and nothing else):
#   make demo   - virtual environment, deploycc, example models made by our own code, builds for ort-cpu,
#                 openvino-cpu and a Jetson bundle
#   make test   - the same environment with dev extras, then ruff, mypy and pytest
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_DIR ?= demo

.PHONY: demo test lint typecheck pytest clean

$(BIN)/python:
	$(PYTHON) -c 'import sys; sys.exit("deploycc needs Python >= 3.10") if sys.version_info < (3, 10) else None'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e '.[dev,onnxsim]'
	touch $@

demo: $(VENV)/.installed
	mkdir -p $(DEMO_DIR)
	$(BIN)/python examples/make_models.py --out $(DEMO_DIR)
	$(BIN)/deploycc inspect $(DEMO_DIR)/small_cnn.onnx
	@# the main job: legalize, build, verify and time the engine on the default CPU target
	$(BIN)/deploycc build $(DEMO_DIR)/small_cnn.onnx --target ort-cpu -o $(DEMO_DIR)/small_cnn.ort-cpu --force
	$(BIN)/deploycc build $(DEMO_DIR)/small_cnn.onnx --target openvino-cpu -o $(DEMO_DIR)/small_cnn.openvino-cpu --force
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
	$(BIN)/hadolint --config docker/hadolint.yaml docker/*.Dockerfile

typecheck: $(VENV)/.installed
	$(BIN)/mypy

pytest: $(VENV)/.installed
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) $(DEMO_DIR) .pytest_cache .mypy_cache .ruff_cache
