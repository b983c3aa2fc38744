// The empty dashboard's setup code, one snippet per framework: static, so a first look
// needs no query. `__ENDPOINT__` becomes this dashboard's own OTLP endpoint. Each snippet
// is the wrapping part of examples/<framework>_agent.py, where the whole program is.
(function () {
  "use strict";
  var FRAMEWORKS = [
    ["OpenAI Agents", "openai_agents", "OpenAIModule", "agent", "an agents.Agent",
      "openai-agents"],
    ["LangGraph", "langgraph", "LangGraphModule", "graph", "a compiled graph, e.g. " +
      "create_react_agent(..., name=\"calculator\")", "langgraph"],
    ["Pydantic AI", "pydantic_ai", "PydanticAIModule", "agent", "a pydantic_ai.Agent",
      "pydantic-ai"],
    ["Google ADK", "adk", "GoogleADKModule", "agent", "a google.adk LlmAgent", "adk"],
    ["Agent Framework", "maf", "MAFModule", "agent", "an agent_framework agent", "maf"],
    ["CrewAI", "crewai", "CrewAIModule", "agent", "a crewai Agent or Crew", "crewai"],
    ["smolagents", "smolagents", "SmolagentsModule", "agent", "a ToolCallingAgent or CodeAgent",
      "smolagents"],
  ];
  var snippets = FRAMEWORKS.map(function (f) {
    return {
      label: f[0],
      example: "examples/" + f[1] + "_agent.py",
      install: "pip install 'runnertrace[" + f[5] + "]'",
      code: [
        "from runnertrace.core import Runtime",
        "from runnertrace.core.models import AgentRequestText",
        "from runnertrace.runners." + f[1] + " import " + f[2],
        "",
        "runtime = Runtime()  # traced by the variables above: no other change",
        f[2] + "([" + f[3] + "], runtime=runtime)  # " + f[3] + ": " + f[4],
        "agent = runtime.agents().get(\"calculator\")  # the name your agent has",
        "session = runtime.sessions().new(\"first-session\")",
        "reply = await runtime.run(agent, session, [AgentRequestText(prompt=\"6 times 7?\")])",
      ].join("\n"),
    };
  });
  window.RT_SNIPPETS = {
    env: [
      "export RUNNERTRACE_TRACE__ENABLED=true RUNNERTRACE_TRACE__CAPTURE_CONTENT=true",
      "export RUNNERTRACE_TRACE__TYPE=otlp RUNNERTRACE_TRACE__OTLP__ENDPOINT=__ENDPOINT__",
    ].join("\n"),
    frameworks: snippets,
  };
})();
