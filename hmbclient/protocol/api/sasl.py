"""SASL APIs: SaslHandshake (17) v0-1 and SaslAuthenticate (36) v0-1 (non-flexible).

SaslHandshake: mechanism -> error_code, mechanisms (those the broker enables; error
UNSUPPORTED_SASL_MECHANISM when ours is not one). After a v0 handshake the SASL tokens travel
as raw size-prefixed frames, outside the Kafka protocol; v1 (KIP-152) means they travel inside
SaslAuthenticate requests instead, so errors can be reported.
SaslAuthenticate: auth_bytes -> error_code, error_message, auth_bytes; v1 +
session_lifetime_ms (KIP-368: 0 = no limit; otherwise the client must re-authenticate on the
same connection before it passes).

Names are Kafka's JSON message schema names.
"""

from __future__ import annotations

from hmbclient.protocol.api.base import ApiKey, define
from hmbclient.protocol.types import Array, Bytes, FieldSpec, Int16, Int64, NullableString, String

_sh_v0: list[FieldSpec] = [("mechanism", String)]
_shr_v0: list[FieldSpec] = [("error_code", Int16), ("mechanisms", Array(String))]

SaslHandshakeRequest = {}
SaslHandshakeResponse = {}
for _v in (0, 1):
    SaslHandshakeRequest[_v], SaslHandshakeResponse[_v] = define(ApiKey.SASL_HANDSHAKE, _v, _sh_v0, _shr_v0)

_sa_v0: list[FieldSpec] = [("auth_bytes", Bytes)]
_sar_v0: list[FieldSpec] = [("error_code", Int16), ("error_message", NullableString), ("auth_bytes", Bytes)]
_sar_v1 = [*_sar_v0, ("session_lifetime_ms", Int64)]

SaslAuthenticateRequest = {}
SaslAuthenticateResponse = {}
for _v, _rs in ((0, _sar_v0), (1, _sar_v1)):
    SaslAuthenticateRequest[_v], SaslAuthenticateResponse[_v] = define(ApiKey.SASL_AUTHENTICATE, _v, _sa_v0, _rs)
