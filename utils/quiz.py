"""Multiple-choice questions in a lesson: radio buttons where widgets work, `answer('b')` everywhere."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Choice:
    """One option: its text, whether it is the best answer, and why (may name facts as {placeholders})."""

    text: str
    right: bool
    why: str


@dataclass
class MultipleChoice:
    """A question with lettered choices; explanations are filled in from facts measured in the lesson."""

    choices: Mapping[str, Choice]
    facts: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if sum(c.right for c in self.choices.values()) != 1:
            raise ValueError("a multiple-choice question needs exactly one choice marked right")
        for letter, choice in self.choices.items():
            try:
                choice.why.format(**self.facts)
            except KeyError as exc:
                raise ValueError(f"choice ({letter}) names the fact {exc} that is not in `facts`") from exc

    def answer(self, letter: str) -> bool:
        """Print whether `letter` is the best answer, and why; return True when it is."""
        key = str(letter).strip().lower()[:1]
        if key not in self.choices:
            print(f"Answer with one of the letters {', '.join(self.choices)}.")
            return False
        choice = self.choices[key]
        verdict = "Correct" if choice.right else "Not the best answer"
        print(f"({key}) {choice.text}\n{verdict}: {choice.why.format(**self.facts)}")
        return choice.right

    def show(self) -> None:
        """Display the choices as radio buttons (explanation under them), or say how to answer without widgets."""
        try:
            import ipywidgets as widgets
            from IPython.display import display
        except ImportError:
            print(f"ipywidgets is not installed: answer with answer('{next(iter(self.choices))}') and so on.")
            return
        picker = widgets.RadioButtons(
            options=[(f"({k}) {c.text}", k) for k, c in self.choices.items()],
            value=None,
            layout={"width": "max-content"},
        )
        explanation = widgets.Output()

        def on_pick(change: dict) -> None:
            explanation.clear_output()
            with explanation:
                self.answer(change["new"])

        picker.observe(on_pick, names="value")
        display(widgets.VBox([picker, explanation]))
