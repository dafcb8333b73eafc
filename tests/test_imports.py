"""Dependencies point down: report, train and config import nothing of sweep
or tune, and the shared lower modules nothing else of the package. Checked in
a fresh interpreter, one import after another: a package an import loads
stays in ``sys.modules``, so what was absent after them all was loaded by none."""
import json
import subprocess
import sys

#: (module, the packages that must not be loaded once it is imported), in import order
ORDER = [
    ("wavygraph.utils", ("wavygraph.",)),
    ("wavygraph.keys", ("wavygraph.",)),
    ("wavygraph.folders", ("wavygraph.",)),
    ("wavygraph.config", ("wavygraph.sweep", "wavygraph.tune")),
    ("wavygraph.train", ("wavygraph.sweep", "wavygraph.tune")),
    ("wavygraph.report", ("wavygraph.sweep", "wavygraph.tune")),
]
PROBE = """
import importlib, json, sys
loaded = {}
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
    loaded[name] = sorted(m for m in sys.modules if m.startswith("wavygraph."))
print(json.dumps(loaded))
"""


def test_imports_point_down():
    names = [name for name, _ in ORDER]
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(names)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, forbidden in ORDER:
        assert name in loaded[name]  # the probe imported it
        lower = {n for n, _ in ORDER[: names.index(name) + 1]}
        above = [m for m in loaded[name] if m not in lower and m.startswith(forbidden)]
        assert above == [], f"importing {name} loads {above}"
