"""The version of looptune (generated code, databases and reports name it)."""
__version__ = "0.1.0"
