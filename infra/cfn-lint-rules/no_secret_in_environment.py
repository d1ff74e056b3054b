"""cfn-lint rule E9101: no dynamic reference to a secret in a function's environment.

A `{{resolve:secretsmanager:…}}` (or `{{resolve:ssm-secure:…}}`) in `Environment` puts the secret's
value into the function's configuration, readable by anyone allowed `lambda:GetFunctionConfiguration`,
and a rotation then needs a deploy (DESIGN.md §6c). Functions get the secret's ARN and read it at
start-up instead. SAM's Globals are merged into each function before the rules run, so this covers
them too. tests/run appends this folder's rules (`cfn-lint --append-rules infra/cfn-lint-rules`) and
checks that fixtures/secret_in_environment.yaml fails with this rule.
"""

from cfnlint.rules import CloudFormationLintRule, RuleMatch

FUNCTION_TYPES = ["AWS::Lambda::Function", "AWS::Serverless::Function"]
MARKERS = ("{{resolve:secretsmanager:", "{{resolve:ssm-secure:")


def _strings(value, path):
    """Every string inside `value` with its path (intrinsic functions included)."""
    if isinstance(value, str):
        yield value, path
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, path + [key])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, path + [index])


class NoSecretInEnvironment(CloudFormationLintRule):
    id = "E9101"
    shortdesc = "No secret in a function's environment"
    description = (
        "A function's Environment must not hold a Secrets Manager or SecureString dynamic "
        "reference: give the function the secret's ARN and read it at start-up."
    )
    source_url = "https://docs.aws.amazon.com/secretsmanager/latest/userguide/retrieving-secrets_lambda.html"
    tags = ["resources", "lambda", "secrets"]

    def match(self, cfn):
        matches = []
        for name, resource in cfn.get_resources(FUNCTION_TYPES).items():
            properties = resource.get("Properties") or {}
            environment = properties.get("Environment")
            if environment is None:
                continue
            base = ["Resources", name, "Properties", "Environment"]
            for text, path in _strings(environment, base):
                if any(marker in text for marker in MARKERS):
                    matches.append(
                        RuleMatch(
                            path,
                            f"{name}: a secret is resolved into the function's environment; "
                            "pass its ARN and read it at start-up",
                        )
                    )
        return matches
