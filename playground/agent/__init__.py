"""The playground's questions as tools for agents (MCP): `tools` answers them with plain types in and JSON-ready
results out, `server` serves them over the Model Context Protocol inside the app."""
