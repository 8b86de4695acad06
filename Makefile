# Two commands do all set-up on a fresh machine:
#   make reproduce   -> sets up .venv, then `icr reproduce all --profile quick --out out`
#   make test        -> sets up .venv, then runs the default (fast) test suite
# The venv is rebuilt only when pyproject.toml changes (stamp file).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
OUT ?= out
PROFILE ?= quick
SEEDS ?= 0,1,2,3,4
WORKERS ?=
# the second float rounding of the published rerun (make robustness; docs/reproduce.md)
ROUNDING ?= avx2

.PHONY: reproduce paper test test-slow chromium figures redecide robustness lint clean-venv

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

# Debian's Chromium renders PNG figures (kaleido) and runs the browser test. Installed when
# missing and possible (root with apt-get); without it figures are written as HTML only.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian chromium (about 1.5 min)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "warning: chromium could not be installed; PNG export and browser test skipped"; \
	  else echo "warning: chromium missing and not installable here; PNG export skipped"; fi; }

reproduce: $(STAMP) chromium
	$(VENV)/bin/icr reproduce all --profile $(PROFILE) --out $(OUT) --seeds $(SEEDS) $(if $(WORKERS),--workers $(WORKERS)) $(if $(and $(wildcard figures/job_seconds.json),$(filter quick,$(PROFILE))),--eta-from figures/job_seconds.json)

# The committed figures/ and README's claim table must be what the registered specs give on the
# committed measurements (icr redecide --check: seconds, no training); then the default suite,
# which builds its own measurements and never reads figures/. Two test workers (pytest-xdist),
# one test file each at a time (module fixtures are built once), one torch thread per process
# (tests/conftest.py): the two cores, not more. The slow step runs serially (it starts Ray).
test: $(STAMP) chromium
	$(VENV)/bin/icr redecide figures --check --readme README.md
	$(PY) -m pytest -q -n 2 --dist loadfile; rc=$$?; if [ $$rc = 5 ]; then echo 'no tests collected'; exit 0; fi; exit $$rc

test-slow: $(STAMP) chromium
	$(PY) -m pytest -q -m slow; rc=$$?; if [ $$rc = 5 ]; then echo 'no slow tests collected'; exit 0; fi; exit $$rc

# Regenerate the committed figures/ (and README.md's claim table) from the default
# reproduction. Publishing refuses a tree
# with uncommitted files (the report must name one commit); ALLOW_DIRTY=1 publishes anyway,
# with the report marked (mechinterp_icr/viz/publish.py).
figures: reproduce
	$(PY) -m mechinterp_icr.viz.publish $(OUT) figures $(if $(ALLOW_DIRTY),--allow-dirty)
	$(VENV)/bin/icr redecide figures --readme README.md

# After a rule change in the claim specs (claims/cr_registry.py, claims/ir_registry.py; commit it
# first: the report names the commit it is written at): every
# verdict, headline, verdict figure, the report and README's claim table from the committed
# measurements, without training. A rerun (make figures) is needed only when what is measured
# changes.
redecide: $(STAMP)
	$(VENV)/bin/icr redecide figures --readme README.md

# The published reproduction's rounding rerun (SPEC 0, "robust to the machine"): the same code,
# profile and seeds under a second kernel setting, attached to figures/ (figures/rerun/), so
# every claim carries the rerun's verdict and `fragile`. Run once after `make figures`, when
# what is measured changes; a rule change is `make redecide`, which redecides both runs.
robustness: $(STAMP) chromium
	$(VENV)/bin/icr reproduce all --profile $(PROFILE) --out $(OUT)-$(ROUNDING) --seeds $(SEEDS) --rounding $(ROUNDING) $(if $(WORKERS),--workers $(WORKERS))
	$(VENV)/bin/icr compare figures $(OUT)-$(ROUNDING) --noise || true
	$(VENV)/bin/icr redecide figures --rerun $(OUT)-$(ROUNDING) --readme README.md

# The paper profile end to end (about half an hour on 2 idle cores; run it in the background:
# `nohup make paper > paper.log 2>&1 &`). Resumable: the same command skips finished jobs.
# Then figures/paper/ gets its summary, report and PNG figures.
PAPER_OUT ?= out-paper
paper: $(STAMP) chromium
	$(VENV)/bin/icr reproduce all --profile paper --out $(PAPER_OUT) --seeds $(SEEDS) $(if $(WORKERS),--workers $(WORKERS))
	$(PY) -m mechinterp_icr.viz.publish $(PAPER_OUT) figures/paper $(if $(ALLOW_DIRTY),--allow-dirty)

lint: $(STAMP)
	$(VENV)/bin/ruff check mechinterp_icr tests

clean-venv:
	rm -rf $(VENV)
