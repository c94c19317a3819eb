"""Frozen, typed configuration for every hmbclient component, keyed by Kafka 0.8 names.

Contract
--------
* A config is a frozen dataclass (``ProducerConfig``, ``SimpleConsumerConfig``,
  ``ConsumerConfig``, ``BrokerConfig``). Field names are the snake_case forms of the Kafka 0.8
  property names, with units in the name (``_ms``, ``_bytes``).
* Every key may be given in any of its spellings: the field name
  (``queue_buffering_max_ms``), the dotted property (``queue.buffering.max.ms``), or an alias
  in either form (``queue.time`` / ``queue_time``, ``linger.ms``). Matching ignores case and
  treats ``.``, ``_`` and ``-`` alike. The same field given twice is an error.
* Unknown keys are never dropped: they raise :class:`~hmbclient.errors.ConfigError` naming the
  key and suggesting close matches. Bad values raise ``ConfigError`` naming the property.
* Values read from ``.properties`` files are strings; each is converted to the field's type
  (int, float, bool, str, a ``Literal`` choice, a comma-separated tuple, or a field-specific
  converter such as :func:`parse_broker_list`). The same conversion applies to keyword
  arguments, so ``ProducerConfig(metadata_broker_list="h:1,h:2")`` normalises to
  ``(("h", 1), ("h", 2))``. Conversion is idempotent: a config rebuilt from its own fields
  (``replace``) is equal to the original.
* Validation runs in ``__post_init__``: per-field ranges and choices, then the class's
  ``_validate`` hook for cross-field rules.
* Secrets (``setting(secret=True)``: ``sasl.password``, ``ssl.password``) are left out of a
  config's repr. The client configs share one definition of the security settings
  (:class:`SecurityConfig`: ``security.protocol``, ``ssl.*``, ``sasl.*``), inherited by
  ``ProducerConfig``, ``SimpleConsumerConfig`` and ``ConsumerConfig``.

Adding a field (for engineers extending these classes)::

    my_timeout_ms: int = setting(5000, prop="my.timeout.ms", min=0, doc="what it bounds")

``prop`` defaults to the field name with ``_`` -> ``.``; ``aliases`` are extra spellings;
``convert`` normalises non-scalar values; ``importable=True`` lets a string name a class
(``"encoders.StringEncoder"``) which is imported and instantiated with no arguments.
A new config class inherits :class:`ConfigBase` and is decorated with :func:`config_class`.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
import os
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from hmbclient.errors import ConfigError

__all__ = [
    "API_VERSIONS",
    "ApiVersion",
    "BrokerList",
    "NEVER",
    "ConfigBase",
    "SecurityConfig",
    "SettingInfo",
    "config_class",
    "setting",
    "parse_broker_list",
    "parse_zookeeper_connect",
    "parse_properties",
    "load_properties",
    "ProducerConfig",
    "SimpleConsumerConfig",
    "ConsumerConfig",
    "BrokerConfig",
]

#: ``(host, port)`` pairs, in the order given.
BrokerList = tuple[tuple[str, int], ...]

#: Protocol dialects a client can pin (see ``hmbclient.net.versions``).
ApiVersion = Literal["auto", "0.8", "0.10", "2.1", "hmb"]
API_VERSIONS: tuple[str, ...] = typing.get_args(ApiVersion)

#: "Never" for interval settings (Java's Long.MAX_VALUE, as Kafka uses).
NEVER = 2**63 - 1

_C = TypeVar("_C", bound="ConfigBase")
_META_KEY = "hmbclient.setting"


class _Required:
    """Sentinel default of a required setting (checked in __post_init__, as a ConfigError)."""

    def __repr__(self) -> str:
        return "<required>"


_REQUIRED: Any = _Required()


@dataclass(frozen=True)
class _Spec:
    prop: str | None
    aliases: tuple[str, ...]
    doc: str
    min: float | None
    max: float | None
    convert: Callable[[Any], Any] | None
    importable: bool
    properties: bool


@dataclass(frozen=True)
class SettingInfo:
    """Describes one setting of a config class (for help texts and tooling)."""

    name: str
    prop: str
    aliases: tuple[str, ...]
    default: Any
    required: bool
    doc: str
    #: a password or key: never shown, never put on a command line
    secret: bool = False


def setting(
    default: Any = _REQUIRED,
    *,
    prop: str | None = None,
    aliases: Iterable[str] = (),
    doc: str = "",
    min: float | None = None,
    max: float | None = None,
    convert: Callable[[Any], Any] | None = None,
    importable: bool = False,
    properties: bool = True,
    default_factory: Callable[[], Any] | None = None,
    secret: bool = False,
) -> Any:
    """Declare a config field (a ``dataclasses.field`` carrying its property metadata).

    Args:
        default: The default value; omit it to make the setting required.
        prop: The dotted Kafka property name (default: field name with ``_`` -> ``.``).
        aliases: Other accepted spellings (dotted or snake_case).
        doc: One line: what the setting means.
        min: Inclusive lower bound for numeric settings.
        max: Inclusive upper bound for numeric settings.
        convert: Normaliser applied to non-None values before type conversion; raise
            ValueError or TypeError to reject a value. Must be idempotent.
        importable: A string value names a class/object to import (and instantiate if it
            is a class); for object-valued settings such as ``serializer``.
        properties: False if the setting cannot be written as a string in a .properties
            file (it is still accepted as a keyword).
        default_factory: Zero-argument callable producing the default (mutually
            exclusive with ``default``).
        secret: A password or key: left out of the config's repr.

    Returns:
        A dataclass field specifier.
    """
    spec = _Spec(
        prop=prop,
        aliases=tuple(aliases),
        doc=doc,
        min=min,
        max=max,
        convert=convert,
        importable=importable,
        properties=properties,
    )
    metadata = {_META_KEY: spec}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata, repr=not secret)
    return dataclasses.field(default=default, metadata=metadata, repr=not secret)


def _norm(key: str) -> str:
    return key.strip().lower().replace(".", "_").replace("-", "_")


def _spec(f: dataclasses.Field[Any]) -> _Spec:
    spec = f.metadata.get(_META_KEY)
    if spec is None:
        return _Spec(None, (), "", None, None, None, False, True)
    assert isinstance(spec, _Spec)
    return spec


def _prop(f: dataclasses.Field[Any]) -> str:
    return _spec(f).prop or f.name.replace("_", ".")


class ConfigBase:
    """Behaviour shared by every config class (use with :func:`config_class`).

    Subclasses get: keyword construction with any spelling of a key, ``from_properties``,
    ``replace``, ``to_properties``, ``settings``, and validation on construction. Override
    ``_validate`` for cross-field rules (call ``super()._validate()``).
    """

    # Set by dataclass() on each decorated class; declared here so type checkers treat
    # configs as dataclass instances (dataclasses.fields / replace / asdict).
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]
    # Filled in by config_class for each decorated class: normalised spelling -> field.
    _index: ClassVar[dict[str, str]] = {}
    # normalised spelling -> how to show it in "did you mean" (dotted or snake form).
    _spellings: ClassVar[dict[str, tuple[str, str]]] = {}
    _hints: ClassVar[dict[str, Any]] = {}

    def __init__(self, **kwargs: Any) -> None:  # replaced by config_class
        raise TypeError(f"{type(self).__name__} must be decorated with @config_class")

    # ----------------------------------------------------------------- construction

    @classmethod
    def from_properties(cls: type[_C], props: Mapping[str, Any], /, **overrides: Any) -> _C:
        """Build a config from Kafka-style properties.

        Args:
            props: Keys in any spelling (``"queue.buffering.max.ms"``, ``"queue_time"``, ...);
                values as Python values or as strings from a ``.properties`` file.
            **overrides: Settings that win over ``props`` (any spelling).

        Returns:
            The validated config.

        Raises:
            ConfigError: An unknown key (with close matches suggested), a key given twice
                within ``props``, a missing required key, or an invalid value.
        """
        if not isinstance(props, Mapping):
            raise ConfigError(
                f"{cls.__name__}.from_properties expects a mapping, not {type(props).__name__}"
            )
        merged = cls._resolve(props)
        merged.update(cls._resolve(overrides))
        return cls(**merged)

    @classmethod
    def split_properties(cls, props: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Split ``props`` into the keys this class knows (any spelling) and the others, e.g.
        a component's own options and the settings it hands to the producer it builds.

        Returns:
            ``(known, other)``, both with the keys as given.
        """
        known: dict[str, Any] = {}
        other: dict[str, Any] = {}
        for key, value in props.items():
            (known if isinstance(key, str) and _norm(key) in cls._index else other)[key] = value
        return known, other

    @classmethod
    def resolve_properties(cls, props: Mapping[str, Any]) -> dict[str, Any]:
        """``props`` keyed by field name (each key in any spelling), values as given.

        Raises:
            ConfigError: an unknown or repeated key.
        """
        return cls._resolve(props)

    @classmethod
    def _resolve(cls, given: Mapping[str, Any]) -> dict[str, Any]:
        """Map each key (any spelling) to its field name; reject unknown and repeated keys."""
        out: dict[str, Any] = {}
        seen: dict[str, str] = {}
        for key, value in given.items():
            if not isinstance(key, str):
                raise ConfigError(f"{cls.__name__} keys must be strings, got {key!r}")
            name = cls._index.get(_norm(key))
            if name is None:
                raise ConfigError(cls._unknown_key_message(key))
            if name in seen:
                raise ConfigError(
                    f"{cls.__name__}: {name!r} given twice, as {seen[name]!r} and {key!r}"
                )
            seen[name] = key
            out[name] = value
        return out

    @classmethod
    def _unknown_key_message(cls, key: str) -> str:
        dotted = "." in key
        candidates = {
            norm: spell[0] if dotted else spell[1] for norm, spell in cls._spellings.items()
        }
        close = difflib.get_close_matches(_norm(key), list(candidates), n=3, cutoff=0.6)
        msg = f"unknown {cls.__name__} key {key!r}"
        if close:
            shown = " or ".join(repr(candidates[c]) for c in close)
            msg += f"; did you mean {shown}?"
        return msg

    def replace(self: _C, **changes: Any) -> _C:
        """Return a copy with some settings changed (any spelling), validated again.

        Args:
            **changes: Settings to change.

        Returns:
            A new config; ``self`` is unchanged (configs are frozen).

        Raises:
            ConfigError: Unknown key or invalid value.
        """
        return dataclasses.replace(self, **type(self)._resolve(changes))

    # ----------------------------------------------------------------- inspection

    @classmethod
    def settings(cls) -> tuple[SettingInfo, ...]:
        """Describe every setting of this class, in declaration order.

        Returns:
            One :class:`SettingInfo` per field.
        """
        infos = []
        for f in dataclasses.fields(cls):
            spec = _spec(f)
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            else:
                default = _REQUIRED
            infos.append(
                SettingInfo(
                    name=f.name,
                    prop=_prop(f),
                    aliases=spec.aliases,
                    default=None if default is _REQUIRED else default,
                    required=default is _REQUIRED,
                    doc=spec.doc,
                    secret=not f.repr,
                )
            )
        return tuple(infos)

    def to_properties(self) -> dict[str, str]:
        """Render the string-representable settings as dotted properties.

        Object-valued settings (serializers, handlers) and unset optional settings (None)
        are left out. ``type(self).from_properties(self.to_properties())`` rebuilds an equal
        config when no object-valued setting is set.

        Returns:
            ``{"dotted.name": "value"}`` for every such setting.
        """
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            spec = _spec(f)
            value = getattr(self, f.name)
            if not spec.properties or spec.importable or value is None:
                continue
            out[_prop(f)] = _render(value)
        return out

    # ----------------------------------------------------------------- validation

    def __post_init__(self) -> None:
        cls = type(self)
        for f in dataclasses.fields(self):
            spec = _spec(f)
            value = getattr(self, f.name)
            if value is _REQUIRED:
                raise ConfigError(f"{cls.__name__}: {_describe(f)} is required")
            new = _normalise(cls.__name__, f, spec, cls._hints[f.name], value)
            if new is not value:
                object.__setattr__(self, f.name, new)
        self._validate()

    def _validate(self) -> None:
        """Cross-field checks; subclasses override and raise ConfigError (via _fail)."""

    def _fail(self, message: str) -> typing.NoReturn:
        raise ConfigError(f"{type(self).__name__}: {message}")

    def _set(self, name: str, value: Any) -> None:
        """Set a derived default from ``_validate`` (the instance is frozen)."""
        object.__setattr__(self, name, value)


def config_class(cls: type[_C]) -> type[_C]:
    """Turn a :class:`ConfigBase` subclass into a frozen, keyword-only config dataclass.

    Args:
        cls: The class body, with fields declared through :func:`setting`.

    Returns:
        The dataclass, whose ``__init__`` accepts every spelling of every key.

    Raises:
        TypeError: Two fields claim the same spelling (a programming error).
    """
    dc = dataclass(frozen=True, kw_only=True)(cls)
    index: dict[str, str] = {}
    spellings: dict[str, tuple[str, str]] = {}

    def claim(spelling: str, name: str) -> None:
        norm = _norm(spelling)
        owner = index.get(norm)
        if owner is not None and owner != name:
            raise TypeError(f"{cls.__name__}: {spelling!r} names both {owner!r} and {name!r}")
        index[norm] = name
        dotted = spelling if "." in spelling else spelling.replace("_", ".")
        spellings.setdefault(norm, (dotted, norm))

    fields = dataclasses.fields(dc)
    for f in fields:
        claim(_prop(f), f.name)
    for f in fields:
        claim(f.name, f.name)
        for alias in _spec(f).aliases:
            claim(alias, f.name)

    dc._index = index
    dc._spellings = spellings
    dc._hints = typing.get_type_hints(dc)

    generated_init = dc.__init__

    def __init__(self: Any, **kwargs: Any) -> None:
        generated_init(self, **dc._resolve(kwargs))

    __init__.__signature__ = inspect.signature(generated_init)  # type: ignore[attr-defined]
    __init__.__doc__ = (
        f"Build a {cls.__name__}; keys may be field names, dotted properties or aliases.\n\n"
        "Raises:\n    ConfigError: unknown key, missing required key, or invalid value."
    )
    __init__.__qualname__ = f"{dc.__qualname__}.__init__"
    dc.__init__ = __init__  # type: ignore[method-assign]
    return dc


# --------------------------------------------------------------------- conversion


def _describe(f: dataclasses.Field[Any]) -> str:
    return f"{_prop(f)!r} ({f.name})"


_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})


def _render(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(_render_item(v) for v in value)
    return str(value)


def _render_item(item: Any) -> str:
    if isinstance(item, tuple) and len(item) == 2:
        host, port = item
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(item)


def _normalise(owner: str, f: dataclasses.Field[Any], spec: _Spec, hint: Any, value: Any) -> Any:
    try:
        if value is None:
            if _allows_none(hint):
                return None
            raise ValueError("must not be None")
        if spec.convert is not None:
            value = spec.convert(value)
        if spec.importable and isinstance(value, str):
            return _import_object(value)
        value = _coerce(hint, value)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{owner}: invalid value {value!r} for {_describe(f)}: {exc}") from None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if spec.min is not None and value < spec.min:
            raise ConfigError(f"{owner}: {_describe(f)} must be >= {spec.min:g}, got {value!r}")
        if spec.max is not None and value > spec.max:
            raise ConfigError(f"{owner}: {_describe(f)} must be <= {spec.max:g}, got {value!r}")
    return value


def _allows_none(hint: Any) -> bool:
    if hint is Any or hint is object or hint is type(None):
        return True
    if _is_union(hint):
        return any(_allows_none(a) for a in typing.get_args(hint))
    return False


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _coerce(hint: Any, value: Any) -> Any:
    """Convert ``value`` (maybe a string from a .properties file) to the type ``hint``."""
    if hint is Any or hint is object:
        return value
    origin = typing.get_origin(hint)
    if _is_union(hint):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        errors = []
        for member in members:
            try:
                return _coerce(member, value)
            except (ValueError, TypeError) as exc:
                errors.append(str(exc))
        raise ValueError("; ".join(errors))
    if origin is Literal:
        return _coerce_choice(typing.get_args(hint), value)
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            if isinstance(value, str):
                items: Iterable[Any] = [p.strip() for p in value.split(",") if p.strip()]
            elif isinstance(value, Iterable):
                items = value
            else:
                raise TypeError(
                    f"expected a comma-separated string or a sequence, not {type(value).__name__}"
                )
            return tuple(_coerce(args[0], item) for item in items)
        if not isinstance(value, tuple) or len(value) != len(args):
            raise TypeError(f"expected a tuple of {len(args)}")
        return tuple(_coerce(a, v) for a, v in zip(args, value, strict=True))
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise TypeError("expected a boolean (true/false)")
    if hint is int:
        if isinstance(value, bool):
            raise TypeError("expected an integer, not a boolean")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            return int(value.strip())
        raise TypeError(f"expected an integer, not {type(value).__name__}")
    if hint is float:
        if isinstance(value, bool):
            raise TypeError("expected a number, not a boolean")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            return float(value.strip())
        raise TypeError(f"expected a number, not {type(value).__name__}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise TypeError(f"expected a string, not {type(value).__name__}")
    if isinstance(hint, type):
        if isinstance(value, hint):
            return value
        raise TypeError(f"expected {hint.__name__}, not {type(value).__name__}")
    return value


def _coerce_choice(choices: tuple[Any, ...], value: Any) -> Any:
    for choice in choices:
        if isinstance(choice, str) and isinstance(value, str):
            if value.strip().lower() == choice.lower():
                return choice
        elif isinstance(choice, int) and not isinstance(value, bool):
            try:
                if int(value.strip() if isinstance(value, str) else value) == choice:
                    return choice
            except (TypeError, ValueError):
                continue
    raise ValueError("must be one of " + ", ".join(repr(c) for c in choices))


def _import_object(path: str) -> Any:
    """Import ``"pkg.mod.Name"`` or ``"pkg.mod:Name"``; instantiate it if it is a class."""
    module_name, sep, attr = path.strip().partition(":")
    if not sep:
        module_name, _, attr = path.strip().rpartition(".")
    if not module_name or not attr:
        raise ValueError("expected a dotted class path such as 'encoders.StringEncoder'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import module {module_name!r}: {exc}") from None
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"{module_name!r} has no attribute {attr!r}") from None
    return obj() if isinstance(obj, type) else obj


# --------------------------------------------------------------------- value parsers


def _parse_host_port(text: str, default_port: int | None) -> tuple[str, int]:
    text = text.strip()
    if text.startswith("["):  # [ipv6]:port
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
        if rest and not rest.startswith(":"):
            raise ValueError(f"bad address {text!r}")
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            host, port_text = text, ""
    if not host:
        raise ValueError(f"missing host in {text!r}")
    if not port_text:
        if default_port is None:
            raise ValueError(f"missing port in {text!r} (expected host:port)")
        return host, default_port
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"bad port in {text!r}") from None
    if not 0 < port < 65536:
        raise ValueError(f"port out of range in {text!r}")
    return host, port


def parse_broker_list(value: str | Iterable[str | tuple[str, int]]) -> BrokerList:
    """Normalise a broker list to ``((host, port), ...)``: the one parser of broker lists.

    Every broker list in the project goes through here: the config classes'
    ``metadata_broker_list`` (alias ``bootstrap.servers``), ``NetClient``'s bootstrap list, the
    Spark integration's options and the command line.

    Args:
        value: ``"h1:9092,h2:9092"`` (IPv6 as ``[::1]:9092``), a sequence of such strings,
            or a sequence of ``(host, port)`` pairs. Empty entries are skipped.

    Returns:
        The brokers in the order given, duplicates removed; ``()`` for an empty list (callers
        that need a broker say so).

    Raises:
        ConfigError: An entry has no port, a bad port, or no host (the message names the
            entry), or ``value`` is neither a string nor a sequence. ``ConfigError`` is a
            ``ValueError``, so a config class reports it against the property being set.
    """
    if isinstance(value, str):
        entries: list[Any] = [p for p in value.split(",") if p.strip()]
    elif isinstance(value, Iterable):
        entries = list(value)
    else:
        raise ConfigError(f"expected 'host:port,...' or a sequence, not {type(value).__name__}")
    out: list[tuple[str, int]] = []
    for entry in entries:
        try:
            if isinstance(entry, str):
                pair = _parse_host_port(entry, None)
            elif isinstance(entry, (tuple, list)) and len(entry) == 2:
                host, port = entry
                if not isinstance(host, str) or not host:
                    raise ValueError(f"bad host in {entry!r}")
                text = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
                pair = _parse_host_port(text, None)
            else:
                raise ValueError(f"bad broker entry {entry!r} (expected 'host:port' or (host, port))")
        except ValueError as exc:
            raise ConfigError(f"broker list: {exc}") from None
        if pair not in out:
            out.append(pair)
    return tuple(out)


def parse_zookeeper_connect(value: str) -> tuple[BrokerList, str | None]:
    """Split a ZooKeeper connect string ``"h1:2181,h2:2181/chroot"``.

    Args:
        value: Hosts (port defaults to 2181), optionally followed by a chroot path.

    Returns:
        ``((host, port), ...)`` and the chroot (None if absent).

    Raises:
        ValueError: Empty, a bad host/port, or a malformed chroot.
    """
    text = value.strip()
    hosts_part, slash, chroot_part = text.partition("/")
    chroot = "/" + chroot_part if slash else None
    if chroot is not None and (chroot == "/" or chroot.endswith("/") or "//" in chroot):
        raise ValueError(f"bad chroot {chroot!r} (expected /path without a trailing slash)")
    hosts = tuple(_parse_host_port(h, 2181) for h in hosts_part.split(",") if h.strip())
    if not hosts:
        raise ValueError("no ZooKeeper hosts given")
    return hosts, chroot


def _zookeeper_connect(value: Any) -> Any:
    if isinstance(value, str):
        parse_zookeeper_connect(value)
        return value.strip()
    return value


LISTENER_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def parse_listener(text: str) -> tuple[str, str, int]:
    """``PROTOCOL://host:port`` -> ``(protocol, host, port)``; an empty host is 0.0.0.0.

    Raises:
        ValueError: an unknown protocol or a bad address.
    """
    proto, sep, addr = text.strip().partition("://")
    proto = proto.strip().upper()
    if not sep or proto not in LISTENER_PROTOCOLS:
        raise ValueError(f"listener {text!r} must be PROTOCOL://host:port with PROTOCOL one of {', '.join(LISTENER_PROTOCOLS)}")
    host, colon, port = addr.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"listener {text!r} needs a port 0..65535")
    return proto, host.strip("[]") or "0.0.0.0", int(port)


def _listener_list(value: Any) -> Any:
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple)):
        for v in value:
            parse_listener(str(v))
        return tuple(str(v).strip() for v in value)
    return value


def _mechanism_list(value: Any) -> Any:
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple)):
        out = tuple(str(v).strip().upper() for v in value)
        for m in out:
            if m not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
                raise ValueError(f"unsupported SASL mechanism {m!r} (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")
        return out
    return value


def _principal_list(value: Any) -> Any:
    if isinstance(value, str):
        value = [v for v in value.split(";") if v.strip()]
    if isinstance(value, (list, tuple)):
        out = tuple(str(v).strip() for v in value)
        for p in out:
            if ":" not in p:
                raise ValueError(f"principal {p!r} must be TYPE:NAME, e.g. User:admin")
        return out
    return value


def _path_list(value: Any) -> Any:
    if isinstance(value, os.PathLike):
        return (os.fspath(value),)
    if isinstance(value, (list, tuple)):
        return tuple(os.fspath(v) if isinstance(v, os.PathLike) else v for v in value)
    return value


def _acks(value: Any) -> Any:
    return -1 if isinstance(value, str) and value.strip().lower() == "all" else value


_CODEC_BY_NUMBER = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def _codec(value: Any) -> Any:
    # Kafka 0.8 accepted the numeric codec ids (0 none, 1 gzip, 2 snappy) as well as names.
    if isinstance(value, int) and not isinstance(value, bool):
        return _CODEC_BY_NUMBER.get(value, value)
    if isinstance(value, str) and value.strip().isdigit():
        return _CODEC_BY_NUMBER.get(int(value), value)
    return value


def _offset_reset(value: Any) -> Any:
    # Accept the post-0.9 spellings too.
    if isinstance(value, str):
        return {"earliest": "smallest", "latest": "largest"}.get(value.strip().lower(), value)
    return value


def _group_id(value: Any) -> Any:
    if isinstance(value, str):
        if not value or value != value.strip():
            raise ValueError("must be non-empty with no surrounding spaces")
        if "/" in value or value in (".", ".."):
            raise ValueError("must be usable as a ZooKeeper path element (no '/')")
    return value


# --------------------------------------------------------------------- .properties files


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and i + 6 <= len(text):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text (the format Kafka's config files use).

    Handles ``#``/``!`` comments, ``key=value``, ``key: value`` and ``key value`` lines,
    backslash line continuations and ``\\t``/``\\n``/``\\uXXXX`` escapes.

    Args:
        text: The file contents.

    Returns:
        ``{key: value}`` with string values (later duplicates win, as in Java).
    """
    props: dict[str, str] = {}
    lines = iter(text.splitlines())
    for raw in lines:
        line = raw.lstrip()
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1] + next(lines, "").lstrip()
        i = 0
        while i < len(line):
            if line[i] == "\\":
                i += 2
                continue
            if line[i] in "=: \t\f":
                break
            i += 1
        key = line[:i]
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        props[_unescape(key)] = _unescape(rest)
    return props


def _continues(line: str) -> bool:
    backslashes = len(line) - len(line.rstrip("\\"))
    return backslashes % 2 == 1


def load_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a ``.properties`` file (utf-8).

    Args:
        path: The file.

    Returns:
        Its ``{key: value}`` pairs (see :func:`parse_properties`).

    Raises:
        ConfigError: The file cannot be read.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read properties file {os.fspath(path)!r}: {exc}") from None
    return parse_properties(text)


# --------------------------------------------------------------------- the configs

CompressionCodec = Literal["none", "gzip", "snappy", "lz4", "zstd"]
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanismName = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def _upper(value: Any) -> Any:
    return value.strip().upper() if isinstance(value, str) else value


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
        convert=_upper,
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
        convert=_upper,
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


@config_class
class ProducerConfig(SecurityConfig):
    """Producer settings (Kafka 0.8 ``kafka.producer.ProducerConfig`` names).

    Defaults that differ from Kafka 0.8, and why:

    * ``queue_buffering_max_ms`` = 5 (0.8: 5000). An async batch waits at most this long for
      company; 5 ms keeps latency low while still batching under load (the modern
      ``linger.ms`` trade-off). Set 5000 for 0.8 behaviour.
    * ``request_required_acks`` = 1 (0.8: 0). With 0 the broker sends no response, so the
      producer could never report a failed write; 1 makes futures and sync ``send``
      meaningful.
    * ``client_id`` = "hmbclient" (0.8: "").
    * ``batch.size`` is an alias of ``batch_num_messages`` (a message count, as it was in
      Kafka 0.7's async producer); the byte cap is ``batch_max_bytes``. Note that the modern Java client's
      ``batch.size`` is in bytes.
    """

    metadata_broker_list: BrokerList = setting(
        aliases=("bootstrap.servers", "broker.list"),
        convert=parse_broker_list,
        doc="metadata.broker.list: bootstrap brokers 'host:port,...' (at least one)",
    )
    producer_type: Literal["sync", "async"] = setting(
        "sync", doc="producer.type: sync sends in the caller; async batches in a sender thread"
    )
    request_required_acks: Literal[0, 1, -1] = setting(
        1,
        aliases=("acks",),
        convert=_acks,
        doc="request.required.acks: 0 none, 1 leader, -1/all ISR",
    )
    request_timeout_ms: int = setting(
        10_000,
        min=1,
        doc="request.timeout.ms: broker-side ack wait and client-side request timeout",
    )
    compression_codec: CompressionCodec = setting(
        "none",
        aliases=("compression.type",),
        convert=_codec,
        doc="compression.codec: batch compression",
    )
    compressed_topics: tuple[str, ...] = setting(
        (), doc="compressed.topics: compress only these topics (empty: all, if a codec is set)"
    )
    message_send_max_retries: int = setting(
        3, min=0, aliases=("retries",), doc="message.send.max.retries: retries of a failed send"
    )
    retry_backoff_ms: int = setting(
        100, min=0, doc="retry.backoff.ms: wait before refreshing metadata and retrying"
    )
    topic_metadata_refresh_interval_ms: int = setting(
        600_000,
        min=-1,
        doc="topic.metadata.refresh.interval.ms: periodic refresh (<0: only on errors)",
    )
    queue_buffering_max_ms: int = setting(
        5,
        min=0,
        aliases=("queue.time", "linger.ms"),
        doc="queue.buffering.max.ms: max wait to fill an async batch",
    )
    queue_buffering_max_messages: int = setting(
        10_000, min=1, doc="queue.buffering.max.messages: async queue bound (messages)"
    )
    queue_enqueue_timeout_ms: int = setting(
        -1,
        min=-1,
        doc="queue.enqueue.timeout.ms: full queue: -1 block, 0 fail at once, >0 wait then fail",
    )
    batch_num_messages: int = setting(
        200,
        min=1,
        aliases=("batch.size",),
        doc="batch.num.messages: max messages per partition batch",
    )
    batch_max_bytes: int = setting(
        1_048_576, min=1, doc="batch.max.bytes: max bytes per partition batch (hmbclient)"
    )
    send_buffer_bytes: int = setting(
        100 * 1024, min=-1, doc="send.buffer.bytes: socket SO_SNDBUF (-1: OS default)"
    )
    client_id: str = setting("hmbclient", doc="client.id: sent with every request")
    api_version: ApiVersion = setting(
        "auto", doc="api.version: auto (ApiVersions probe), 0.8 / 0.10 / 2.1 pinned, or hmb dialect"
    )
    message_max_bytes: int = setting(
        1_000_000,
        min=0,
        aliases=("max.request.size",),
        doc="message.max.bytes: largest single message accepted by send",
    )
    max_in_flight_requests_per_connection: int = setting(
        5, min=1, doc="max.in.flight.requests.per.connection: pipelined requests per broker"
    )
    serializer: Any = setting(
        None,
        prop="serializer.class",
        aliases=("value.serializer",),
        importable=True,
        doc="serializer.class: value Encoder (None: bytes pass through)",
    )
    key_serializer: Any = setting(
        None,
        prop="key.serializer.class",
        aliases=("key.serializer",),
        importable=True,
        doc="key.serializer.class: key Encoder (None: same as serializer)",
    )
    partitioner: Any = setting(
        None,
        prop="partitioner.class",
        importable=True,
        doc="partitioner.class: Partitioner (None: partitioners.DefaultPartitioner)",
    )
    callback_handler: Any = setting(
        None,
        prop="callback.handler",
        importable=True,
        doc="callback.handler: hooks at each stage of the async pipeline",
    )
    event_handler: Any = setting(
        None,
        prop="event.handler",
        importable=True,
        doc="event.handler: replaces the default send pipeline (0.8 EventHandler)",
    )

    def _validate(self) -> None:
        super()._validate()
        if not self.metadata_broker_list:
            self._fail("'metadata.broker.list' (metadata_broker_list) needs at least one host:port")
        if (
            self.producer_type == "async"
            and self.batch_num_messages > self.queue_buffering_max_messages
        ):
            # Same rule as 0.8's ProducerConfig.validateBatchSize.
            self._fail(
                f"'batch.num.messages' ({self.batch_num_messages}) can't be larger than "
                f"'queue.buffering.max.messages' ({self.queue_buffering_max_messages})"
            )


@config_class
class SimpleConsumerConfig(SecurityConfig):
    """SimpleConsumer settings: one broker, stateless requests (0.8 ``SimpleConsumer`` args).

    ``fetch_min_bytes``/``fetch_wait_max_ms`` default to 0 as in 0.8's ``FetchRequestBuilder``:
    a SimpleConsumer fetch answers at once with whatever is there.
    """

    host: str = setting(prop="host", doc="broker host")
    port: int = setting(prop="port", min=1, max=65535, doc="broker port")
    so_timeout_ms: int = setting(
        30_000,
        prop="socket.timeout.ms",
        aliases=("so.timeout.ms",),
        min=1,
        doc="socket.timeout.ms: how long to wait for a response",
    )
    buffer_size: int = setting(
        65_536,
        prop="socket.receive.buffer.bytes",
        aliases=("buffer.size",),
        min=-1,
        doc="socket.receive.buffer.bytes: socket SO_RCVBUF (-1: OS default)",
    )
    client_id: str = setting("hmbclient", doc="client.id: sent with every request")
    api_version: ApiVersion = setting("auto", doc="api.version: auto, 0.8, 0.10, 2.1 or hmb")
    fetch_message_max_bytes: int = setting(
        1_048_576, min=1, doc="fetch.message.max.bytes: default max_size of a FetchRequest"
    )
    fetch_min_bytes: int = setting(0, min=0, doc="fetch.min.bytes: broker waits for this much data")
    fetch_wait_max_ms: int = setting(0, min=0, doc="fetch.wait.max.ms: ...but at most this long")

    def _validate(self) -> None:
        super()._validate()
        if not self.host.strip():
            self._fail("'host' must not be empty")


@config_class
class ConsumerConfig(SecurityConfig):
    """High-level consumer settings (Kafka 0.8 ``kafka.consumer.ConsumerConfig`` names).

    Defaults that differ from Kafka 0.8, and why:

    * ``rebalance_backoff_ms`` = 200 (0.8: 2000, tied to ``zookeeper.sync.time.ms``). A
      rebalance attempt fails when a partition's previous owner has not yet released its
      ephemeral owner znode; released owners disappear within milliseconds on a local or
      LAN ZooKeeper, so waiting 2 s per retry only stretches stop-the-world pauses. With
      ``rebalance_max_retries`` = 4 a group still tolerates ~1 s of owner lag; raise it
      for slow or remote ensembles.
    * ``client_id`` defaults to ``group_id`` (as in 0.8), filled in on construction.

    Two ways to balance a group (``group_protocol``): ``zookeeper`` (Kafka 0.8: membership,
    ownership and, by default, offsets in ZooKeeper; needs ``zookeeper_connect``) or
    ``broker`` (the brokers' group coordinator: FindCoordinator, JoinGroup, SyncGroup,
    Heartbeat, LeaveGroup; needs ``metadata_broker_list`` / ``bootstrap.servers``; offsets
    always go to the coordinator, so ``offsets_storage`` and ``dual_commit_enabled`` do not
    apply). Unset, it is ``zookeeper`` when ``zookeeper_connect`` is given, else ``broker``.
    ``session_timeout_ms``, ``heartbeat_interval_ms`` and ``max_poll_interval_ms`` (sent as
    JoinGroup's rebalance timeout) apply to ``broker`` only, with Kafka's names; the defaults
    are the Java consumer's before Kafka 3.0 (session 10 s, heartbeat 3 s, 5 minutes).
    """

    zookeeper_connect: str | None = setting(
        None,
        convert=_zookeeper_connect,
        doc="zookeeper.connect: 'host:port,...[/chroot]' of the ensemble (group.protocol=zookeeper)",
    )
    group_id: str = setting(convert=_group_id, doc="group.id: the consumer group (required)")
    consumer_id: str | None = setting(
        None, doc="consumer.id: id in /consumers/<g>/ids (None: <group>_<host>-<ms>-<uuid8>)"
    )
    socket_timeout_ms: int = setting(
        30_000, min=1, doc="socket.timeout.ms: fetch/metadata response wait"
    )
    socket_receive_buffer_bytes: int = setting(
        65_536, min=-1, doc="socket.receive.buffer.bytes: socket SO_RCVBUF (-1: OS default)"
    )
    fetch_message_max_bytes: int = setting(
        1_048_576, min=1, doc="fetch.message.max.bytes: bytes per partition per fetch"
    )
    num_consumer_fetchers: int = setting(1, min=1, doc="num.consumer.fetchers: fetcher threads")
    auto_commit_enable: bool = setting(True, doc="auto.commit.enable: commit offsets periodically")
    auto_commit_interval_ms: int = setting(
        60_000, min=1, doc="auto.commit.interval.ms: commit period"
    )
    queued_max_message_chunks: int = setting(
        2, min=1, doc="queued.max.message.chunks: fetched chunks buffered per stream"
    )
    rebalance_max_retries: int = setting(
        4, min=0, doc="rebalance.max.retries: attempts per rebalance"
    )
    fetch_min_bytes: int = setting(1, min=0, doc="fetch.min.bytes: broker waits for this much data")
    fetch_wait_max_ms: int = setting(100, min=0, doc="fetch.wait.max.ms: ...but at most this long")
    rebalance_backoff_ms: int = setting(
        200, min=0, doc="rebalance.backoff.ms: wait between rebalance attempts"
    )
    refresh_leader_backoff_ms: int = setting(
        200, min=0, doc="refresh.leader.backoff.ms: wait before retrying a leaderless partition"
    )
    auto_offset_reset: Literal["smallest", "largest"] = setting(
        "largest",
        convert=_offset_reset,
        doc="auto.offset.reset: start point without a committed offset",
    )
    consumer_timeout_ms: int = setting(
        -1,
        min=-1,
        doc="consumer.timeout.ms: stream raises ConsumerTimeoutError after this idle time (-1: never)",
    )
    exclude_internal_topics: bool = setting(
        True, doc="exclude.internal.topics: filters never match __consumer_offsets"
    )
    partition_assignment_strategy: Literal["range", "roundrobin"] = setting(
        "range", doc="partition.assignment.strategy: range or roundrobin"
    )
    client_id: str | None = setting(None, doc="client.id: sent with requests (None: group.id)")
    zookeeper_session_timeout_ms: int = setting(
        6_000, min=1, doc="zookeeper.session.timeout.ms: session expiry (ephemerals vanish)"
    )
    zookeeper_connection_timeout_ms: int = setting(
        6_000, min=1, doc="zookeeper.connection.timeout.ms: max wait to connect"
    )
    zookeeper_sync_time_ms: int = setting(
        2_000, min=0, doc="zookeeper.sync.time.ms: how far a follower may lag"
    )
    offsets_storage: Literal["zookeeper", "kafka"] = setting(
        "zookeeper", doc="offsets.storage: where offsets are committed"
    )
    offsets_channel_backoff_ms: int = setting(
        1_000, min=0, doc="offsets.channel.backoff.ms: wait before reconnecting to the coordinator"
    )
    offsets_channel_socket_timeout_ms: int = setting(
        10_000, min=1, doc="offsets.channel.socket.timeout.ms: coordinator response wait"
    )
    offsets_commit_max_retries: int = setting(
        5, min=0, doc="offsets.commit.max.retries: retries of a failed commit"
    )
    dual_commit_enabled: bool = setting(
        True, doc="dual.commit.enabled: with offsets.storage=kafka also commit to ZooKeeper"
    )
    metadata_broker_list: BrokerList = setting(
        (),
        aliases=("bootstrap.servers",),
        convert=parse_broker_list,
        doc="metadata.broker.list: bootstrap brokers (group.protocol=broker), or brokers for "
        "the Metadata API when they are not in ZooKeeper",
    )
    api_version: ApiVersion = setting("auto", doc="api.version: auto, 0.8, 0.10, 2.1 or hmb")
    group_protocol: Literal["zookeeper", "broker"] | None = setting(
        None,
        doc="group.protocol: zookeeper or broker (the brokers' group coordinator); "
        "None: zookeeper when zookeeper.connect is set, else broker",
    )
    session_timeout_ms: int = setting(
        10_000,
        min=1,
        doc="session.timeout.ms: (broker) the coordinator drops a member silent for this long",
    )
    heartbeat_interval_ms: int = setting(
        3_000, min=1, doc="heartbeat.interval.ms: (broker) time between two heartbeats"
    )
    max_poll_interval_ms: int = setting(
        300_000,
        min=1,
        aliases=("rebalance.timeout.ms",),
        doc="max.poll.interval.ms: (broker) JoinGroup's rebalance timeout, how long the "
        "coordinator waits for members to rejoin",
    )

    def _validate(self) -> None:
        super()._validate()
        if self.client_id is None:
            self._set("client_id", self.group_id)
        if self.group_protocol is None:
            self._set("group_protocol", "zookeeper" if self.zookeeper_connect else "broker")
        if self.group_protocol == "zookeeper" and not self.zookeeper_connect:
            self._fail(
                "'zookeeper.connect' (zookeeper_connect) is required with group.protocol="
                "zookeeper; for groups balanced by the brokers give 'bootstrap.servers' "
                "(metadata_broker_list) and group.protocol=broker"
            )
        if self.group_protocol == "broker":
            if not self.metadata_broker_list:
                self._fail(
                    "group.protocol=broker needs 'bootstrap.servers' (metadata_broker_list); "
                    "for ZooKeeper groups give 'zookeeper.connect' (zookeeper_connect)"
                )
            if self.heartbeat_interval_ms >= self.session_timeout_ms:
                # Kafka's rule: at least one heartbeat must reach the coordinator per session.
                self._fail(
                    f"'heartbeat.interval.ms' ({self.heartbeat_interval_ms}) must be lower than "
                    f"'session.timeout.ms' ({self.session_timeout_ms})"
                )
        if self.fetch_wait_max_ms > self.socket_timeout_ms:
            # Same rule as 0.8's ConsumerConfig: a long-poll must not outlive the socket.
            self._fail(
                f"'socket.timeout.ms' ({self.socket_timeout_ms}) should be at least "
                f"'fetch.wait.max.ms' ({self.fetch_wait_max_ms}) to prevent needless socket timeouts"
            )


@config_class
class BrokerConfig(ConfigBase):
    """Embedded broker settings (Kafka 0.8 ``kafka.server.KafkaConfig`` names).

    Defaults that differ from Kafka 0.8, and why:

    * ``host`` = 127.0.0.1 and ``port`` = 0 (an ephemeral port): an embedded broker is for
      tests and local work and should not listen on the network or collide.
    * ``log_dirs`` empty: the broker makes a temporary directory (removed on stop).
    * ``num_network_threads`` = 1, ``num_io_threads`` = 2 (0.8: 3 and 8): a Python broker is
      GIL-bound, so more threads add switching, not throughput.
    * ``offsets_topic_num_partitions`` = 3 (0.8.2: 50): 50 partition directories per broker
      slow start-up; 3 still spreads groups over partitions (and coordinators over a cluster).
    * ``log_flush_interval_messages``/``_ms`` = never (as 0.8.1+): rely on the OS page cache.
    """

    broker_id: int = setting(0, min=0, doc="broker.id: unique id within the cluster")
    host: str = setting(
        "127.0.0.1", prop="host.name", aliases=("host",), doc="host.name: interface to bind"
    )
    port: int = setting(0, min=0, max=65535, doc="port: listen port (0: ephemeral)")
    advertised_host_name: str | None = setting(
        None, doc="advertised.host.name: host given to clients (None: host.name)"
    )
    advertised_port: int | None = setting(
        None, min=1, max=65535, doc="advertised.port: port given to clients (None: the bound port)"
    )
    log_dirs: tuple[str, ...] = setting(
        (),
        aliases=("log.dir",),
        convert=_path_list,
        doc="log.dirs: data directories (empty: a temp dir)",
    )
    num_partitions: int = setting(1, min=1, doc="num.partitions: partitions of auto-created topics")
    default_replication_factor: int = setting(
        1, min=1, doc="default.replication.factor: replicas of auto-created topics"
    )
    log_segment_bytes: int = setting(
        1 << 30, min=14, doc="log.segment.bytes: roll a segment at this size"
    )
    log_max_open_read_handles: int = setting(
        256, min=1, doc="log.max.open.read.handles: closed segments kept open for reading (least recently read closed first)"
    )
    log_index_interval_bytes: int = setting(
        4096, min=0, doc="log.index.interval.bytes: bytes between sparse index entries"
    )
    log_index_size_max_bytes: int = setting(
        10 * 1024 * 1024, min=8, doc="log.index.size.max.bytes: max size of one offset index"
    )
    log_flush_interval_messages: int = setting(
        NEVER, min=1, doc="log.flush.interval.messages: fsync after this many messages"
    )
    log_flush_interval_ms: int = setting(
        NEVER, min=0, doc="log.flush.interval.ms: fsync at least this often"
    )
    log_retention_ms: int = setting(
        7 * 24 * 3600 * 1000,
        min=-1,
        doc="log.retention.ms: delete segments older than this (-1: never)",
    )
    log_retention_bytes: int = setting(
        -1, min=-1, doc="log.retention.bytes: per-partition size cap (-1: none)"
    )
    log_retention_check_interval_ms: int = setting(
        300_000, min=1, doc="log.retention.check.interval.ms: how often retention runs"
    )
    producer_id_expiration_ms: int = setting(
        86_400_000, min=1, doc="producer.id.expiration.ms: forget an idempotent producer's state after this long without a write (checked with retention)"
    )
    message_max_bytes: int = setting(
        1_000_012, min=0, doc="message.max.bytes: largest message (set) the broker accepts"
    )
    socket_request_max_bytes: int = setting(
        100 * 1024 * 1024, min=1, doc="socket.request.max.bytes: largest request frame"
    )
    socket_send_buffer_bytes: int = setting(
        100 * 1024, min=-1, doc="socket.send.buffer.bytes: SO_SNDBUF (-1: OS default)"
    )
    socket_receive_buffer_bytes: int = setting(
        100 * 1024, min=-1, doc="socket.receive.buffer.bytes: SO_RCVBUF (-1: OS default)"
    )
    num_network_threads: int = setting(1, min=1, doc="num.network.threads: selector threads")
    num_io_threads: int = setting(2, min=1, doc="num.io.threads: request handler threads")
    zookeeper_connect: str | None = setting(
        None, convert=_zookeeper_connect, doc="zookeeper.connect: register here (None: standalone)"
    )
    zookeeper_session_timeout_ms: int = setting(
        6_000, min=1, doc="zookeeper.session.timeout.ms: registration session expiry"
    )
    zookeeper_connection_timeout_ms: int = setting(
        6_000, min=1, doc="zookeeper.connection.timeout.ms: max wait to connect"
    )
    auto_create_topics_enable: bool = setting(
        True, doc="auto.create.topics.enable: create unknown topics on metadata/produce"
    )
    connections_max_idle_ms: int = setting(
        600_000, min=-1, doc="connections.max.idle.ms: close idle connections (-1: never)"
    )
    offsets_topic_num_partitions: int = setting(
        3, min=1, doc="offsets.topic.num.partitions: partitions of __consumer_offsets"
    )
    offsets_retention_minutes: int = setting(
        1_440, min=1, doc="offsets.retention.minutes: drop committed offsets older than this"
    )
    offsets_topic_replication_factor: int = setting(
        3,
        min=1,
        doc="offsets.topic.replication.factor: replicas of __consumer_offsets (capped at the live brokers)",
    )
    transaction_state_log_num_partitions: int = setting(
        3, min=1, doc="transaction.state.log.num.partitions: partitions of __transaction_state"
    )
    transaction_state_log_replication_factor: int = setting(
        3,
        min=1,
        doc="transaction.state.log.replication.factor: replicas of __transaction_state (capped at the live brokers)",
    )
    transaction_max_timeout_ms: int = setting(
        900_000, min=1, doc="transaction.max.timeout.ms: the longest transaction timeout a producer may ask for"
    )
    transactional_id_expiration_ms: int = setting(
        604_800_000, min=1, doc="transactional.id.expiration.ms: forget a transactional id idle this long"
    )
    group_initial_rebalance_delay_ms: int = setting(
        3_000,
        min=0,
        doc="group.initial.rebalance.delay.ms: an empty group waits this long for more members before its first rebalance",
    )
    group_min_session_timeout_ms: int = setting(
        6_000, min=0, doc="group.min.session.timeout.ms: smallest session timeout a group member may ask for"
    )
    group_max_session_timeout_ms: int = setting(
        300_000, min=0, doc="group.max.session.timeout.ms: largest session timeout a group member may ask for"
    )
    min_insync_replicas: int = setting(
        1, min=1, doc="min.insync.replicas: ISR size an acks=-1 produce needs"
    )
    replica_lag_time_max_ms: int = setting(
        10_000, min=1, doc="replica.lag.time.max.ms: a follower not caught up this long leaves the ISR"
    )
    replica_fetch_wait_max_ms: int = setting(
        500, min=0, doc="replica.fetch.wait.max.ms: max wait of a follower's fetch"
    )
    replica_fetch_max_bytes: int = setting(
        1024 * 1024, min=1, doc="replica.fetch.max.bytes: bytes a follower asks per partition"
    )
    replica_fetch_backoff_ms: int = setting(
        200, min=0, doc="replica.fetch.backoff.ms: pause after a failed follower fetch"
    )
    replica_high_watermark_checkpoint_interval_ms: int = setting(
        5_000, min=1, doc="replica.high.watermark.checkpoint.interval.ms: how often HWs are saved"
    )
    unclean_leader_election_enable: bool = setting(
        False, doc="unclean.leader.election.enable: elect a replica outside the ISR (may lose data)"
    )
    controlled_shutdown_enable: bool = setting(
        True, doc="controlled.shutdown.enable: move leaderships away before stopping"
    )
    controlled_shutdown_max_retries: int = setting(
        3, min=0, doc="controlled.shutdown.max.retries: attempts before stopping anyway"
    )
    controlled_shutdown_retry_backoff_ms: int = setting(
        500, min=0, doc="controlled.shutdown.retry.backoff.ms: pause between attempts"
    )
    controller_socket_timeout_ms: int = setting(
        30_000, min=1, doc="controller.socket.timeout.ms: the controller's wait for a broker's answer"
    )
    listeners: tuple[str, ...] = setting(
        (),
        convert=_listener_list,
        doc="listeners: PROTOCOL://host:port, comma-separated; PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL (empty: PLAINTEXT on host.name:port)",
    )
    ssl_certfile: str | None = setting(
        None, aliases=("ssl.keystore.location",), doc="ssl.certfile: the broker's PEM certificate (chain) for SSL and SASL_SSL listeners"
    )
    ssl_keyfile: str | None = setting(None, doc="ssl.keyfile: its PEM private key (None: in ssl.certfile)")
    ssl_cafile: str | None = setting(
        None, aliases=("ssl.truststore.location",), doc="ssl.cafile: PEM CA certificates that client certificates must chain to"
    )
    ssl_client_auth: Literal["none", "requested", "required"] = setting(
        "none", doc="ssl.client.auth: ask TLS clients for a certificate (required: refuse those without a trusted one)"
    )
    sasl_enabled_mechanisms: tuple[str, ...] = setting(
        ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
        convert=_mechanism_list,
        doc="sasl.enabled.mechanisms: SASL mechanisms offered on SASL listeners",
    )
    sasl_credentials_file: str | None = setting(
        None, doc="sasl.credentials.file: SCRAM credentials file (None: ZooKeeper /config/users)"
    )
    connections_max_reauth_ms: int = setting(
        0, min=0, doc="connections.max.reauth.ms: SASL sessions end after this; clients must re-authenticate (KIP-368; 0: never)"
    )
    security_inter_broker_protocol: str | None = setting(
        None,
        convert=_upper,
        doc="security.inter.broker.protocol: the listener brokers use to reach each other (None: the first listener)",
    )
    sasl_mechanism_inter_broker_protocol: SaslMechanismName = setting(
        "PLAIN", convert=_upper, doc="sasl.mechanism.inter.broker.protocol: SASL mechanism between brokers"
    )
    sasl_inter_broker_username: str | None = setting(
        None, doc="sasl.inter.broker.username: the user a broker authenticates as to the others (SASL inter-broker listener)"
    )
    sasl_inter_broker_password: str | None = setting(
        None, secret=True, doc="sasl.inter.broker.password: that user's password"
    )
    authorizer_class_name: str = setting(
        "", doc="authorizer.class.name: non-empty turns on the ACL authorizer (ACLs in authorizer.acls.file or ZooKeeper)"
    )
    authorizer_acls_file: str | None = setting(
        None, doc="authorizer.acls.file: JSON file of ACLs (None: ZooKeeper /kafka-acl)"
    )
    super_users: tuple[str, ...] = setting(
        (), convert=_principal_list, doc="super.users: principals allowed everything, ';'-separated (User:admin;User:broker)"
    )
    allow_everyone_if_no_acl_found: bool = setting(
        False, doc="allow.everyone.if.no.acl.found: a resource without any ACL is open to all"
    )

    def _validate(self) -> None:
        super()._validate()
        if not self.host.strip():
            self._fail("'host.name' (host) must not be empty")
        if self.log_index_interval_bytes > self.log_segment_bytes:
            self._fail("'log.index.interval.bytes' can't be larger than 'log.segment.bytes'")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            self._fail("'group.min.session.timeout.ms' can't be larger than 'group.max.session.timeout.ms'")
        if any(parse_listener(x)[0] in ("SSL", "SASL_SSL") for x in self.listeners) and not self.ssl_certfile:
            self._fail("an SSL or SASL_SSL listener needs 'ssl.certfile'")
        if self.ssl_client_auth == "required" and not self.ssl_cafile:
            self._fail("'ssl.client.auth'=required needs 'ssl.cafile' to check client certificates against")
        protocols = [parse_listener(x)[0] for x in self.listeners] or ["PLAINTEXT"]
        inter = self.security_inter_broker_protocol
        if inter is not None and inter not in protocols:
            self._fail(f"'security.inter.broker.protocol'={inter} is not one of the listeners ({', '.join(protocols)})")
        # Without a user a SASL inter-broker listener still serves a broker alone; a channel to
        # another broker then fails naming these settings (BrokerChannel).
        if bool(self.sasl_inter_broker_username) != (self.sasl_inter_broker_password is not None):
            self._fail("'sasl.inter.broker.username' and 'sasl.inter.broker.password' go together")

    @property
    def inter_broker_protocol(self) -> str:
        """The security protocol (= listener name) brokers use to reach each other."""
        if self.security_inter_broker_protocol:
            return self.security_inter_broker_protocol
        return parse_listener(self.listeners[0])[0] if self.listeners else "PLAINTEXT"
