"""The Coding Plan's 5-hour quota: z.ai's reading, the proxy's own estimate, the forecast, the pacing rule."""
