"""tracelint's version, where the reports that print it (SARIF, HTML) can read it without importing the package's
public API above them."""

__version__ = "0.1.0"
