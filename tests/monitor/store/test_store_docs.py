"""The Store is the one door to the data: each public method says what it takes and gives back."""

from __future__ import annotations

import inspect

from monitor.store import Store


def public_methods():
    for name, member in inspect.getmembers(Store):
        if name.startswith("_"):
            continue
        fn = member.fget if isinstance(member, property) else member
        if callable(fn):
            yield name, fn


def test_every_public_store_method_documents_its_arguments_and_what_it_returns():
    undocumented = []
    for name, fn in public_methods():
        doc = inspect.getdoc(fn) or ""
        signature = inspect.signature(fn)
        takes = [p for p in signature.parameters if p != "self"]
        gives = signature.return_annotation not in (None, "None", inspect.Signature.empty)
        if not doc or (takes and "Args:" not in doc) or (gives and "Returns:" not in doc):
            undocumented.append(name)
    assert undocumented == []
