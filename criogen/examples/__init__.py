"""Example assistants, registered by default (see ``CRIOGEN_ASSISTANTS``)."""
