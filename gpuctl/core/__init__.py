"""The gate logic as pure functions on small frozen records.

No I/O here, and none of kubernetes, typer, rich or yaml: the CLI and the operator both call this package, so their
answers cannot drift apart.

Modules: ``units`` (M, shares, percent units, quantities), ``naming`` (resource keys, labels, entrances), ``ledger``
(Devices → cards), ``instancetypes`` (InstanceType records), ``admission`` (verdicts and the JSON patch),
``requests`` (gate 1), ``credits`` (gate 2), ``views`` (EX/SH/SL/PT).
"""
