"""Alembic migrations for the campaign store (a package so that installs ship the revision files)."""
