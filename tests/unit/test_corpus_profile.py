"""The corpus profile (docs/corpus-profiles.md): ``generic`` by default, ``linked`` per tenant, and a
bad value named with its fix."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.common.config import CorpusProfile, CorpusSettings
from services.common.settings import RampartSettings


def test_generic_is_the_default() -> None:
    corpus = RampartSettings().corpus
    assert corpus.profile is CorpusProfile.GENERIC and corpus.tenants == {}
    assert corpus.of("anyone") is CorpusProfile.GENERIC and not corpus.linked("anyone")
    assert not corpus.any_linked()


def test_a_tenant_overrides_the_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAMPART_CORPUS__TENANTS", '{"wiki": "linked"}')
    corpus = RampartSettings().corpus
    assert corpus.linked("wiki") and not corpus.linked("papers") and corpus.any_linked()
    monkeypatch.setenv("RAMPART_CORPUS__PROFILE", "linked")
    monkeypatch.setenv("RAMPART_CORPUS__TENANTS", '{"papers": "generic"}')
    corpus = RampartSettings().corpus
    assert corpus.linked("wiki") and not corpus.linked("papers")


def test_with_tenant_copies() -> None:
    base = CorpusSettings(tenants={"wiki": CorpusProfile.LINKED})
    both = base.with_tenant("eval", CorpusProfile.LINKED)
    assert both.linked("eval") and both.linked("wiki") and not base.linked("eval")
    assert not both.with_tenant("wiki", CorpusProfile.GENERIC).linked("wiki")


def test_an_empty_variable_means_no_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAMPART_CORPUS__TENANTS", "")
    assert RampartSettings().corpus.tenants == {}


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        (
            "RAMPART_CORPUS__PROFILE",
            "wiki",
            "corpus.profile = 'wiki' is not a corpus profile; use one of generic, linked",
        ),
        (
            "RAMPART_CORPUS__TENANTS",
            '{"wiki": "linkd"}',
            "corpus.tenants['wiki'] = 'linkd' is not a corpus profile",
        ),
        ("RAMPART_CORPUS__TENANTS", "wiki=linked", "corpus.tenants = 'wiki=linked' is not JSON"),
        ("RAMPART_CORPUS__TENANTS", '["wiki"]', "must map tenant names to profiles, got list"),
        ("RAMPART_CORPUS__TENANTS", '{"no tenant": "linked"}', "names 'no tenant', which is no tenant name"),
    ],
)
def test_a_bad_value_is_named_with_its_fix(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, said: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as caught:
        RampartSettings()
    message = str(caught.value)
    assert said in message and name in message, message
