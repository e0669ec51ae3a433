"""Test configuration: x64 on (the library's documented expectation for 64-bit data)
and strict dtype promotion, so that a silent dtype change fails loudly."""

import jax
import pytest

pytest_plugins = ["_s3", "_cluster"]  # fixtures: s3_server, s3_bucket (moto's S3 server); dask_client

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")


@pytest.fixture
def x64_off():
    """Run one test with jax_enable_x64 off, restoring it afterwards."""
    jax.config.update("jax_enable_x64", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", True)
