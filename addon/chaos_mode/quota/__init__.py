"""The Coding Plan's quota windows: z.ai's reading, the proxy's estimate, the forecast, the pacing rule."""
