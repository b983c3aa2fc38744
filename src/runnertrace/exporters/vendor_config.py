"""Config models of the OTLP-based vendor backends (``trace.<name>`` sections).

Kept free of vendor imports so that loading the configuration stays light.
Every field may be left unset and is then taken from the vendor's usual env var
by the backend itself.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class _BackendSection(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class OtlpConfig(_BackendSection):
    endpoint: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(10.0, gt=0)


class LangfuseConfig(_BackendSection):
    public_key: str | None = None
    secret_key: SecretStr | None = None
    host: str | None = None


class LogfireConfig(_BackendSection):
    token: SecretStr | None = None
    base_url: str | None = None


class OpenLLMetryConfig(_BackendSection):
    api_key: SecretStr | None = None
    base_url: str | None = None
    instrument: list[str] = Field(default_factory=list)
