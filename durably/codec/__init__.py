"""How values are stored: JSON encoding of inputs, results and errors, and the check that
a value reads back as it went in."""
