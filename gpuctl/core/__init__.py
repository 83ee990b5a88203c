"""The gate logic as pure functions on small frozen records.

No I/O here, and none of kubernetes, typer, rich or yaml: the CLI and the operator both call this package, so their
answers cannot drift apart.

Modules: ``units`` (M, shares, percent units, quantities), ``naming`` (resource keys, labels, entrances), records
(``ledger`` for Devices → cards, ``instancetypes``, ``nodes``, ``pods``, ``workloads``), ``admission`` (verdicts and
the JSON patch), ``requests`` (gate 1), ``credits`` (gate 2), ``fit`` (gate 3), ``capacity`` (gate 4), ``allocator``
(gate 5), ``views`` (EX/SH/SL/PT), ``pins`` (fit labels and the Workload pin), ``instancetype_rules``, ``instances``
and ``kvcache`` (webhooks), ``lifecycle`` (deletion guard, phase, stop rule, patch plans), ``webhooks`` (the chain a
request goes through) and ``explain`` (the five gates for one Workload).
"""
