"""The configuration: the pydantic schema of the modelRouting block, and reading it from a file."""
