"""privlm drops two third-party log lines its users cannot act on, and nothing else."""

from __future__ import annotations

import logging

import pytest

from privlm.quiet import DropMessages, quiet_third_party_logs

pytestmark = pytest.mark.fast


def _record(name: str, message: str) -> logging.LogRecord:
    return logging.LogRecord(name, logging.WARNING, __file__, 1, message, None, None)


def test_only_the_named_messages_are_dropped():
    drop = DropMessages("Failed to load")
    assert not drop.filter(_record("torchao", "Failed to load /x/_C_mxfp8.so: missing"))
    assert drop.filter(_record("torchao", "Skipping import of cpp extensions"))
    never = DropMessages("Failed to load", applies=lambda: False)
    assert never.filter(_record("torchao", "Failed to load /x/_C_mxfp8.so: missing"))


def test_the_filters_are_installed_once_on_their_loggers():
    quiet_third_party_logs()
    quiet_third_party_logs()
    for name in ("torchao", "torch.utils._pytree"):
        filters = [f for f in logging.getLogger(name).filters if isinstance(f, DropMessages)]
        assert len(filters) == 1
    pytree = logging.getLogger("torch.utils._pytree").filters
    enum_notice = "<enum 'X'> is an Enum subclass and is now natively supported by torch.compile"
    assert not all(f.filter(_record("torch.utils._pytree", enum_notice)) for f in pytree)
    assert all(f.filter(_record("torch.utils._pytree", "another notice")) for f in pytree)
