"""Packaging lives in setup.cfg; this file lets older tools build the project."""

from setuptools import setup

setup()
