"""The settings machinery of every hmbclient config, keyed by Kafka 0.8 names.

This module is the one place that knows how a setting is declared (:func:`setting`), spelled,
converted, validated and refused. Each component declares its own config class *beside the
component*, on this machinery:

=================================  ==========================================================
``hmbclient.net.config``           :class:`SecurityConfig` (TLS and SASL of every client)
``hmbclient.producer.config``      :class:`ProducerConfig`
``hmbclient.consumer.config``      :class:`SimpleConsumerConfig`, :class:`ConsumerConfig`
``hmbclient.broker.config``        :class:`BrokerConfig` (and ``parse_listener``)
=================================  ==========================================================

All of them are re-exported here, so ``from hmbclient.config import ProducerConfig`` is the
public spelling; the re-export is lazy (PEP 562 ``__getattr__``) because the component modules
import this one.

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
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from hmbclient.errors import ConfigError

__all__ = [
    "API_VERSIONS",
    "ApiVersion",
    "BrokerList",
    "NEVER",
    "ConfigBase",
    "SaslMechanismName",
    "SettingInfo",
    "config_class",
    "setting",
    "convert_upper",
    "convert_zookeeper_connect",
    "parse_broker_list",
    "parse_zookeeper_connect",
    "parse_properties",
    "load_properties",
    # each component's config, defined beside the component and re-exported here (lazily)
    "SecurityConfig",
    "ProducerConfig",
    "SimpleConsumerConfig",
    "ConsumerConfig",
    "PollConsumerConfig",
    "BrokerConfig",
    "LISTENER_PROTOCOLS",
    "parse_listener",
]

if TYPE_CHECKING:
    from hmbclient.broker.config import LISTENER_PROTOCOLS, BrokerConfig, parse_listener
    from hmbclient.consumer.config import ConsumerConfig, PollConsumerConfig, SimpleConsumerConfig
    from hmbclient.net.config import SecurityConfig
    from hmbclient.producer.config import ProducerConfig

#: Each component's config lives beside the component; these names are re-exported from here so
#: that ``from hmbclient.config import ProducerConfig`` keeps working. Imported on first use:
#: the component modules import this machinery, so an eager import here would be a cycle.
_LAZY = {
    "SecurityConfig": "hmbclient.net.config",
    "ProducerConfig": "hmbclient.producer.config",
    "SimpleConsumerConfig": "hmbclient.consumer.config",
    "ConsumerConfig": "hmbclient.consumer.config",
    "PollConsumerConfig": "hmbclient.consumer.config",
    "BrokerConfig": "hmbclient.broker.config",
    "LISTENER_PROTOCOLS": "hmbclient.broker.config",
    "parse_listener": "hmbclient.broker.config",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

#: ``(host, port)`` pairs, in the order given.
BrokerList = tuple[tuple[str, int], ...]

#: Protocol dialects a client can pin (see ``hmbclient.net.versions``).
ApiVersion = Literal["auto", "0.8", "0.10", "2.1", "hmb"]
API_VERSIONS: tuple[str, ...] = typing.get_args(ApiVersion)

#: The SASL mechanisms hmbclient speaks, client and broker side.
SaslMechanismName = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

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
    ``_validate`` for cross-field rules (call ``super()._validate()``), and ``_implied`` for
    defaults that follow from other keys the caller gave (Kafka's "acks defaults to all when
    idempotence is on").
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
    def _implied(cls, given: dict[str, Any]) -> dict[str, Any]:
        """The resolved keys (field names) with defaults implied by the others added; the
        keys the caller gave are never changed."""
        return given

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
        generated_init(self, **dc._implied(dc._resolve(kwargs)))

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



def convert_zookeeper_connect(value: Any) -> Any:
    """Setting converter for ``zookeeper.connect``: checked by :func:`parse_zookeeper_connect`, kept as text."""
    if isinstance(value, str):
        parse_zookeeper_connect(value)
        return value.strip()
    return value



def convert_upper(value: Any) -> Any:
    """Setting converter: text trimmed and upper-cased (protocol and mechanism names)."""
    return value.strip().upper() if isinstance(value, str) else value


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

