"""Ground: text, rows, defaults, errors, secret files and the keyed draw."""
