"""The flag dialects of the shipped engines (``domain/flags/dialect.py``): SGLang's, vLLM's."""
