"""Print the README's configuration tables from the config classes themselves, so the docs
cannot drift from the code: ``python docs/config_tables.py > /tmp/tables.md``.
A test compares README.md with this output."""

from __future__ import annotations

import sys

from hmbclient.config import BrokerConfig, ConsumerConfig, PollConsumerConfig, ProducerConfig, SimpleConsumerConfig

SECTIONS = (
    ("Producer", ProducerConfig),
    ("SimpleConsumer", SimpleConsumerConfig),
    ("ConsumerConnector (`Consumer.create`)", ConsumerConfig),
    ("Consumer (subscribe/poll, `Consumer(...)`)", PollConsumerConfig),
    ("Embedded broker (`EmbeddedBroker`, `hmb broker --set name=value`)", BrokerConfig),
)


def _default(info: object) -> str:
    if getattr(info, "required", False):
        return "*required*"
    value = getattr(info, "default", None)
    if value is None:
        return "–"
    if isinstance(value, tuple):
        value = ",".join(map(str, value)) or "–"
    if value == 2**63 - 1:
        return "never"
    return f"`{value}`"


def render() -> str:
    out = []
    for title, cls in SECTIONS:
        out.append(f"#### {title}\n")
        out.append("| name | 0.8 property | default | meaning |")
        out.append("|---|---|---|---|")
        for info in cls.settings():
            doc = info.doc.split(": ", 1)[1] if ": " in info.doc else info.doc
            doc = doc.replace("|", "\\|").replace("\n", " ")
            prop = f"`{info.prop}`" + (" (" + ", ".join(f"`{a}`" for a in info.aliases) + ")" if info.aliases else "")
            out.append(f"| `{info.name}` | {prop} | {_default(info)} | {doc} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(render())
