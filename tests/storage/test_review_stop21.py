"""Review (stop 21): findings in the storage's changes of stop 21, each with the test that failed
before its fix."""

from __future__ import annotations

import traceback

import pytest

from plone_connector.storage import JsonbStorage, StorageOpenError

PASSWORD = "s3cr3t xyzzy"


@pytest.mark.parametrize("dsn", [
    f"postgresql://probe:{PASSWORD}@127.0.0.1:1/x",  # a space libpq wants percent-encoded
    f"host=127.0.0.1 port=1 password={PASSWORD}",  # libpq: missing "=" after "xyzzy"
])
def test_a_malformed_dsn_is_refused_without_its_password(dsn, tmp_path):
    # StorageOpenError promises a message without the password; libpq's own message for a DSN it
    # cannot parse quotes the part it stumbled on, here the password (or a piece of it), and the
    # chained driver error appears in every logged traceback.
    with pytest.raises(StorageOpenError, match="invalid DSN") as raised:
        JsonbStorage(dsn, blob_dir=str(tmp_path / "blobs"))
    shown = "".join(traceback.format_exception(raised.value))
    assert "s3cr3t" not in shown and "xyzzy" not in shown, shown


def test_an_unreachable_server_is_named_without_the_ssl_key_password(tmp_path):
    # libpq's sslpassword (the client key's passphrase) is as secret as the password.
    with pytest.raises(StorageOpenError, match="cannot open the storage at") as raised:
        JsonbStorage("host=127.0.0.1 port=1 dbname=x sslpassword=k3ysecret password=s3cr3t",
                     blob_dir=str(tmp_path / "blobs"))
    assert "127.0.0.1" in str(raised.value)
    assert "k3ysecret" not in str(raised.value) and "s3cr3t" not in str(raised.value)
