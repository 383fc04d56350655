"""AWS adapters: DynamoDB implementations of the ports.

``satellite.aws.tables`` (table creation from ``template.yaml``) is imported by its full name: it
needs PyYAML, which only local stacks and tests install, so the package must not pull it in.
"""

from __future__ import annotations

from satellite.aws.catalog_store import PART_BYTES, DynamoCatalogStore

__all__ = ["PART_BYTES", "DynamoCatalogStore"]
