# Two entry points: `make reproduce` (the main job) and `make test`. Both set up .venv first.
# `make demo` is the older one-sweep demo (every variant on 3-digit addition, ~3 min).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: reproduce demo test test-fast gpu-check venv clean

venv: $(VENV)/.installed

# Reuse a torch that is already installed (e.g. a CUDA build); otherwise install the pinned CPU-friendly 2.13.0.
$(VENV)/.installed: pyproject.toml
	@if $(PYTHON) -c "import torch" 2>/dev/null; then \
		$(PYTHON) -m venv --system-site-packages $(VENV); \
	else \
		$(PYTHON) -m venv $(VENV); \
	fi
	@$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install torch==2.13.0
	$(BIN)/python -m pip install -e ".[dev]"
	@touch $@

reproduce: venv
	$(BIN)/mixit reproduce --preset quick

demo: venv
	$(BIN)/mixit sweep --tasks addition --digits 3 --variants all --d-model 64 --n-layers 2 --n-heads 4 \
		--steps 1500 --batch-size 128 --lr 1e-3 --eval-every 250 --seeds 0 --workers 2 --out checkpoints/demo

# Two test processes (pytest-xdist); `make test TEST_WORKERS=auto` for one per core, 0 for one process.
TEST_WORKERS ?= 2

test: venv
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# The edit-test loop: every package, without the tests marked slow (torchrun, Ray, notebooks, the browser,
# long training, end-to-end reproductions, and each CLI case's fresh interpreter); `make test` runs them all.
# 1,450 tests; under 5 minutes on 2 cores.
test-fast: venv
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not slow"

# The CUDA path, run once (benchmarks/gpu_check.py): device tests, a short bf16 run of every paper-preset shape with
# its step time, a one-process torchrun (NCCL), and the CUDA-trained runs analysed and opened in the explorer on the
# CPU. Without a GPU it runs the same steps on the CPU at tiny sizes (the dry form, about 4 minutes on 2 cores).
gpu-check: venv
	@if $(BIN)/python -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then \
		$(BIN)/python benchmarks/gpu_check.py all --out gpu-check; \
	else \
		echo "no CUDA device: the dry form, on the CPU"; $(BIN)/python benchmarks/gpu_check.py all --dry --out gpu-check; \
	fi

clean:
	rm -rf $(VENV) checkpoints/demo runs/quick reports/quick gpu-check
