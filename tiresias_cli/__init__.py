"""What every Tiresias command line shares, on click: one-line usage errors with exit code 2,
defaults shown in ``--help``, option sections (:mod:`tiresias_cli.kit`), and value types
checked with the message a user reads (:mod:`tiresias_cli.values`).

It sits below ``coordinator`` and ``ibverbs_tap`` and imports neither, so both can use it
and the package arrows stay one-way."""
