"""The two doors to z.ai, Anthropic Messages and OpenAI chat completions: request bodies, streamed answers,
our own replies."""
