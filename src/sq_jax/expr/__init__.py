"""Expressions: index spaces, the expression IR, the SeQuant-syntax parser and serializer."""
