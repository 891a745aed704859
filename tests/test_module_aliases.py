"""Old module paths, kept for one release, still give the objects of their new homes."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

# (old path, new path); criogen.models, the one that warns, is tested in test_llms.py.
ALIASES = [
    ("criogen.engine.runner", "criogen.engine.active_run"),
    ("criogen.engine.agent_errors", "criogen.engine.errors"),
    ("criogen.storage.base", "criogen.engine.store"),
    ("criogen.storage.memory", "criogen.engine.memory_store"),
]


@pytest.mark.parametrize(("old", "new"), ALIASES)
def test_an_old_path_exports_the_same_objects_as_the_new_one(old: str, new: str) -> None:
    old_module, new_module = importlib.import_module(old), importlib.import_module(new)

    assert old_module.__all__
    assert set(old_module.__all__) <= set(new_module.__all__)
    for name in old_module.__all__:
        assert getattr(old_module, name) is getattr(new_module, name), name


def test_importing_the_old_models_path_warns_once_and_names_the_importer() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    code = (
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    from criogen.models import OpenAIChat, ScriptedModel\n"
        "    import criogen.models\n"
        "from criogen.llms import OpenAIChat as New\n"
        "assert OpenAIChat is New\n"
        "for w in caught:\n"
        "    print(w.category.__name__, w.filename, w.lineno)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )

    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["DeprecationWarning <string> 4"]


API_MODELS = [
    ("ApiToken", "criogen.storage.models.tokens"),
    ("DEFAULT_EXPIRY", "criogen.storage.models.tokens"),
    ("TOKEN_PREFIX", "criogen.storage.models.tokens"),
    ("default_expiry", "criogen.storage.models.tokens"),
    ("hash_token", "criogen.storage.models.tokens"),
    ("new_token", "criogen.storage.models.tokens"),
    ("Cron", "criogen.storage.models.crons"),
]


@pytest.mark.parametrize(("name", "home"), API_MODELS)
def test_the_old_api_models_names_warn_and_give_the_cores_objects(name: str, home: str) -> None:
    api_models = importlib.import_module("api.models")

    with pytest.warns(DeprecationWarning, match=f"api.models.{name} is deprecated.*{home}"):
        old = getattr(api_models, name)

    assert old is getattr(importlib.import_module(home), name)


def test_api_models_imports_no_model_and_keeps_the_default_its_migration_names() -> None:
    api_models = importlib.import_module("api.models")

    # Loaded by Django with the app: it must not warn, nor import a model.
    assert "ApiToken" not in vars(api_models) and "Cron" not in vars(api_models)
    assert api_models._now() is not None  # api migration 0002's default, without a warning
    with pytest.raises(AttributeError):
        api_models.Missing  # noqa: B018
