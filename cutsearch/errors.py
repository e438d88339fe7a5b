"""Errors a user can fix. The CLI prints these as one line; anything else is a bug."""


class UserError(Exception):
    """Bad input or environment: reported as one clear line and a non-zero exit."""


class EnvironmentProblem(UserError):
    """The machine lacks something cutsearch needs (nvcc, a Hopper GPU, torch...)."""


class StudyTaken(UserError):
    """The study named holds another layer, another kind of times or another GPU's."""

    def __init__(self, reason: str, advice: str = "choose another --study name") -> None:
        super().__init__(f"{reason}: {advice}")
        self.reason = reason
