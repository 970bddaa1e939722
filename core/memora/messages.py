"""Every user-visible kernel string, overridable by hosts (the Agent option ``messages``).

Templates use ``str.format`` fields; a template may only use the fields its default uses, so a
typo in an override fails at construction with the field and the legal names.
"""

from __future__ import annotations

import string
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator
from pydantic_core import PydanticCustomError

__all__ = ["Messages"]


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


class Messages(BaseModel):
    """UI and prompt strings.  Defaults are English."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    aborted_by_user: str = "Stopped by the user."
    aborted_by_timeout: str = "Stopped: the model stopped responding."
    max_iterations_reached: str = (
        "[max_iterations_reached] The step budget for this turn is used up; "
        "ask me to continue if the work is not finished."
    )
    interrupted_marker: str = "[interrupted]"
    context_truncated: str = "[context truncated: {skipped} earlier messages omitted, {kept} kept]"
    soft_limit_wrapup: str = (
        "The conversation is close to the context limit. Wrap up: finish the current step, "
        "summarise what is done and what remains, and stop calling tools unless essential."
    )
    recent_conversation_label: str = "Recent conversation"
    user_label: str = "User"
    assistant_label: str = "Assistant"
    reflection_hint: str = (
        "The tool call failed. Check the error, fix the arguments or choose another approach. "
        "Remaining tool steps: {remaining}."
    )
    meeting_member_prompt: str = (
        "Meeting of the team on the request above. You speak as {member}. "
        "Give your own view in a few sentences; do not repeat what was already said.\n"
        "Said so far:\n{contributions}"
    )
    meeting_chair_prompt: str = (
        "You chair this meeting. Sum up what the members said into one answer to the request "
        "above: where they agree, where they differ, and what to do.\n"
        "The members said:\n{contributions}"
    )
    meeting_nothing_yet: str = "(nothing yet)"
    context_summary_prompt: str = (
        "These messages were dropped from a long conversation to save space. Summarise them in "
        "a few sentences: the requests, the decisions, facts and open items that matter later. "
        "Write in the language of the conversation."
    )
    traits_intro: str = "Your traits (0 = not at all, 1 = very much): "
    plan_request_words: str = (
        "plan,planning,step by step,steps,todo,to-do,task list,checklist,roadmap,"
        "计划,规划,步骤,分步,清单,任务表"
    )
    """Comma-separated words that mean "make a plan" (``multiStepReasoning: manual``)."""
    self_review_prompt: str = (
        "Review your answer above once against the user's request and the tool results. "
        "If it needs no changes, reply exactly: No changes needed. "
        "Otherwise reply with the corrected final answer."
    )
    duplicate_tool_call_warning: str = (
        "You have called the same tool with the same arguments {threshold} times in a row. "
        "Use the result you already have or try a different approach."
    )
    empty_response_fallback: str = (
        "The model returned an empty answer. Please rephrase the request or try again."
    )
    empty_response_truncated: str = (
        "The model used its whole output budget without producing an answer after "
        "{attempts} attempts. Raise the output limit or ask for a shorter answer."
    )
    # strategy instructions in the system prompt
    ask_user_instruction: str = (
        "When you meet {situations}, ask the user with the ask_user tool instead of guessing "
        "(at most {limit} questions per turn)."
    )
    readonly_instruction: str = (
        "You are in read-only mode: do not try to write files or run commands that change state."
    )
    manual_plan_instruction: str = (
        "Do not create a task table unless the user explicitly asks for a plan."
    )
    auto_plan_instruction: str = (
        "For multi-step work, keep a task table with task_table_update and advance it as you go."
    )
    no_tools_instruction: str = "No tools are available in this role; answer directly."
    compact_system_prompt: str = (
        "You are {assistant}, a small assistant model running offline on this computer. You cannot "
        "read files, run commands or look anything up. Answer the user directly in a few plain "
        "sentences; when you do not know, say so."
    )
    """The whole system prompt for a small local model (a provider with ``compact_prompt``):
    a rule list or a persona of paragraphs is what such a model repeats back."""
    compact_readme: str = "This is how the project's README begins:\n\n{readme}"
    plan_log_intro: str = (
        "Recent steps (a log of what was already done; not the current instruction):\n{steps}"
    )
    skills_intro: str = "Skills available (load one with read_skill before using it):"
    summary_prompt: str = (
        "Summarise this round of conversation for long-term memory in at most 5 short "
        "sentences: decisions, facts, preferences and open items worth recalling later. "
        "Write in the language of the conversation.{focus}"
    )

    @field_validator("*")
    @classmethod
    def _same_fields(cls, value: Any, info: Any) -> Any:
        field = cls.model_fields[info.field_name]
        default = field.default
        if isinstance(value, str) and isinstance(default, str):
            try:
                used = _fields(value)
            except ValueError as exc:
                raise PydanticCustomError(
                    "template",
                    "messages.{name}: malformed template ({err})",
                    {"name": info.field_name, "err": str(exc)},
                ) from exc
            legal = _fields(default)
            if not used <= legal:
                raise PydanticCustomError(
                    "template",
                    "messages.{name} uses unknown field(s) {bad}; legal: {legal}",
                    {
                        "name": info.field_name,
                        "bad": ", ".join(sorted(used - legal)),
                        "legal": ", ".join(sorted(legal)) or "none",
                    },
                )
        return value

    def render(self, name: str, **values: Any) -> str:
        template: str = getattr(self, name)
        return template.format(**values) if values else template
