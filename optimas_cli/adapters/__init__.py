"""Agents of other frameworks as optimas components (docs/own_pipeline.md, "Agents from other frameworks"):
`openai_agents` (the OpenAI Agents SDK, extra `openai-agents`) and `autogen` (AutoGen AgentChat, extra
`autogen`). Each module needs its extra and refuses in one line naming it; this package imports neither."""
