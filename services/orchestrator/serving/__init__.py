"""The pipeline as a service: its entry point, wire messages, HTTP ingress and Ray Serve app (docs/ray-serve.md)."""
