"""Adapters that plug fai into other libraries' attention slots. Each module imports its library
only when it is itself imported, so the package keeps numpy as its one dependency:

    import fai.integrations.transformers    # attn_implementation="fai" in Hugging Face transformers
"""
