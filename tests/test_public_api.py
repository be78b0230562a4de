"""The public API answers what it lists: every name of ``__all__`` (``edgeprof`` and ``edgeprof.api``) resolves, a
star import binds them all, and docs/api.md renders each one."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import edgeprof
import edgeprof.api

API_PAGE = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def _listed() -> list[tuple[str, str]]:
    return [("edgeprof", name) for name in edgeprof.__all__] + [("edgeprof.api", name) for name in edgeprof.api.__all__]


@pytest.mark.parametrize("module,name", _listed(), ids=lambda v: v)
def test_every_listed_name_resolves_as_an_attribute(module, name):
    found = getattr(sys.modules[module], name)  # AttributeError here is the bug this file guards against

    assert found is not None
    if name != "__version__":  # edgeprof re-exports edgeprof.api's objects themselves, not copies
        assert getattr(edgeprof, name) is getattr(edgeprof.api, name)


def test_edgeprof_lists_the_names_of_edgeprof_api_and_its_version():
    assert edgeprof.__all__ == [*edgeprof.api.__all__, "__version__"]
    assert set(edgeprof.__all__) <= set(dir(edgeprof))


def test_a_name_it_does_not_list_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'ReportWriter'"):
        edgeprof.ReportWriter  # noqa: B018


def test_a_star_import_binds_every_listed_name_and_the_light_ones_load_no_torch():
    """In a fresh process: ``from edgeprof import *`` binds exactly ``__all__``; before it, the names that need no
    run (the config, the report reader, the monitor) import neither torch nor Flower."""
    probe = ("import sys\n"
             "from edgeprof import RunConfig, read_report, Report, monitor, Monitor, Measurement, phase\n"
             "light = not {'torch', 'flwr'} & set(sys.modules)\n"
             "import edgeprof\n"
             "names = {}\n"
             "exec('from edgeprof import *', names)\n"
             "print(light, sorted(set(names) - {'__builtins__'}) == sorted(edgeprof.__all__))\n")

    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]


def _rendered_objects() -> list[object]:
    """What the page's mkdocstrings directives render: ``::: module.Name`` that object; ``::: module`` the members its
    ``members:`` option lists, else the names of the module's ``__all__`` (re-exports included, as mkdocstrings
    renders them), else the public names the module defines."""
    import importlib

    objects: list[object] = []
    for match in re.finditer(r"^::: ([\w.]+)\n((?:    .*\n)*)", API_PAGE.read_text(), flags=re.M):
        target, options = match.groups()
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError:
            home, _, attr = target.rpartition(".")
            objects.append(getattr(importlib.import_module(home), attr))
            continue
        listed = re.search(r"members:\n((?:\s+- \w+\n)+)", options)
        defined = [n for n, v in vars(module).items() if not n.startswith("_") and getattr(v, "__module__", "") == target]
        names = re.findall(r"- (\w+)", listed.group(1)) if listed else getattr(module, "__all__", None) or defined
        objects += [getattr(module, n) for n in names]
    return objects


@pytest.mark.parametrize("name", edgeprof.api.__all__)
def test_every_listed_name_is_rendered_on_the_api_page(name):
    obj = getattr(edgeprof.api, name)

    assert any(obj is o for o in _rendered_objects()), f"no mkdocstrings directive in docs/api.md renders {name}"


def test_the_version_is_named_on_the_api_page():
    assert "`edgeprof.__version__`" in API_PAGE.read_text()


@pytest.mark.parametrize("home,name", [("edgeprof.config", "RunConfig"), ("edgeprof.rounds.simulate", "RunResult"),
                                       ("edgeprof.report.writer", "Report"),
                                       ("edgeprof.session.measurement", "MonitorConfig"),
                                       ("edgeprof.session.measurement", "Measurement")])
def test_the_api_page_lists_every_field_of_each_public_dataclass_once_by_its_name(home, name):
    """Readable in the repository and rendered on the site: the page's table of a dataclass's fields names each
    field of the code, in order, with its type, and nothing else; the class is rendered by one directive alone."""
    import dataclasses
    import importlib

    cls = getattr(importlib.import_module(home), name)
    text = API_PAGE.read_text()
    block = text[text.index(f"Fields of `{name}`"):]
    block = block[:block.index("\n\n", block.index("| --- |"))]
    listed = re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", block, flags=re.M)

    assert [f for f, _ in listed] == [f.name for f in dataclasses.fields(cls)]
    assert [t.replace("\\|", "|") for _, t in listed] == [str(f.type).strip("'") for f in dataclasses.fields(cls)]
    assert sum(o is cls for o in _rendered_objects()) == 1, f"{name} is rendered more than once"
