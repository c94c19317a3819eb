"""How a client connects: the TLS and SASL settings every client config inherits.

:class:`SecurityConfig` is declared on the settings machinery of :mod:`hmbclient.config`
(and re-exported there); :class:`hmbclient.net.security.Security` reads it.
"""

from __future__ import annotations

from typing import Literal

from hmbclient.config import ConfigBase, SaslMechanismName, config_class, convert_upper, setting

__all__ = ["SecurityConfig", "SecurityProtocol"]

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]


@config_class
class SecurityConfig(ConfigBase):
    """How a client connects: TLS and SASL (Kafka property names; kafka-python and librdkafka
    spellings are aliases). One definition, inherited by every client config; the net layer
    reads it through ``hmbclient.net.security.Security.from_config``.

    ``security.protocol``: PLAINTEXT (default), SSL (TLS), SASL_PLAINTEXT (SASL without TLS:
    PLAIN then sends the password in clear text) or SASL_SSL. TLS verifies the broker's
    certificate against ``ssl.cafile`` (else the system trust store) and, unless
    ``ssl.check.hostname`` is false, that it names the broker's host. SASL needs
    ``sasl.username`` and ``sasl.password``; ``sasl.mechanism`` is PLAIN, SCRAM-SHA-256 or
    SCRAM-SHA-512. The passwords never appear in the config's repr.
    """

    security_protocol: SecurityProtocol = setting(
        "PLAINTEXT",
        convert=convert_upper,
        doc="security.protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
    )
    ssl_cafile: str | None = setting(
        None,
        aliases=("ssl.ca.location",),
        doc="ssl.cafile: PEM file of the CA(s) that sign the brokers' certificates (None: system trust store)",
    )
    ssl_certfile: str | None = setting(
        None,
        aliases=("ssl.certificate.location",),
        doc="ssl.certfile: PEM client certificate, for brokers that require one (mutual TLS)",
    )
    ssl_keyfile: str | None = setting(
        None,
        aliases=("ssl.key.location",),
        doc="ssl.keyfile: PEM private key of ssl.certfile (None: in ssl.certfile)",
    )
    ssl_password: str | None = setting(
        None, aliases=("ssl.key.password",), secret=True, doc="ssl.password: unlocks an encrypted ssl.keyfile"
    )
    ssl_check_hostname: bool = setting(
        True, doc="ssl.check.hostname: the broker's certificate must name the host dialled"
    )
    ssl_crlfile: str | None = setting(
        None, aliases=("ssl.crl.location",), doc="ssl.crlfile: PEM certificate revocation list to check"
    )
    sasl_mechanism: SaslMechanismName = setting(
        "PLAIN",
        aliases=("sasl.mechanisms",),
        convert=convert_upper,
        doc="sasl.mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
    )
    sasl_username: str | None = setting(
        None, aliases=("sasl.plain.username",), doc="sasl.username: the SASL user"
    )
    sasl_password: str | None = setting(
        None, aliases=("sasl.plain.password",), secret=True, doc="sasl.password: the SASL user's password"
    )

    def _validate(self) -> None:
        super()._validate()
        if self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL") and (
            not self.sasl_username or self.sasl_password is None
        ):
            self._fail(f"security.protocol={self.security_protocol} needs 'sasl.username' and 'sasl.password'")
        if self.ssl_keyfile and not self.ssl_certfile:
            self._fail("'ssl.keyfile' is given without 'ssl.certfile'")

