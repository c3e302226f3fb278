"""oci:// sources (#43): model artifacts pulled from an OCI registry over
the registry API, with no container runtime."""
