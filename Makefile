# The two commands a fresh machine needs (Python >= 3.10 and nothing else):
#   make demo   - virtual environment, deploycc, an example model made by our own code, the main job on it
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
	$(BIN)/deploycc check $(DEMO_DIR)/small_cnn.onnx --target ort-cpu
	$(BIN)/deploycc legalize $(DEMO_DIR)/small_cnn.onnx --target ort-cpu -o $(DEMO_DIR)/small_cnn.ort-cpu.onnx
	$(BIN)/deploycc legalize $(DEMO_DIR)/encoder_block.onnx --target jetson-nano \
		-o $(DEMO_DIR)/encoder_block.jetson-nano.onnx --report $(DEMO_DIR)/encoder_block.jetson-nano.json
	@# exit code 1 here means "illegal nodes found": expected for the TensorRT targets
	$(BIN)/deploycc check $(DEMO_DIR)/encoder_block.onnx \
		--target ort-cpu --target openvino-cpu --target jetson-xavier --target jetson-nano \
		|| echo "deploycc check exited $$? (1 = illegal nodes on some target, the legalizer's job)"

test: $(VENV)/.installed lint typecheck pytest

lint: $(VENV)/.installed
	$(BIN)/ruff check deploycc tests examples tools benchmarks

typecheck: $(VENV)/.installed
	$(BIN)/mypy

pytest: $(VENV)/.installed
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) $(DEMO_DIR) .pytest_cache .mypy_cache .ruff_cache
