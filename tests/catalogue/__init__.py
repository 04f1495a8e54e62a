"""Catalogue optimizers (one test module per group) against numpy references and live peers."""
