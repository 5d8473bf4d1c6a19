"""The two tools: look-ups in a small made-up table, so no model knows the answers by heart.

Plain Python functions with a docstring each; `TOOLS` is their OpenAI
function schema, which the workflow offers the model and the demonstrations
carry. A tool's result is text, the way the model reads it.
"""

from __future__ import annotations

from typing import Any

OWNERS = {
    "Biscuit": "Ada Moss", "Pepper": "Ivo Strand", "Mochi": "Lena Quill", "Ziggy": "Omar Vale",
    "Tofu": "Rhea Dunn", "Waffles": "Sami Brook", "Nugget": "Tess Harrow", "Pixel": "Ugo Fenn",
    "Clover": "Ada Moss", "Bramble": "Ivo Strand", "Sprout": "Lena Quill", "Juniper": "Omar Vale",
    "Pickle": "Rhea Dunn", "Noodle": "Sami Brook", "Marble": "Tess Harrow", "Sorrel": "Ugo Fenn",
    "Dumpling": "Ada Moss", "Fennel": "Ivo Strand", "Pudding": "Lena Quill", "Quince": "Omar Vale",
    "Rascal": "Rhea Dunn", "Saffron": "Sami Brook", "Truffle": "Tess Harrow", "Wasabi": "Ugo Fenn",
    "Acorn": "Ada Moss", "Beacon": "Ivo Strand", "Cobble": "Lena Quill", "Dapple": "Omar Vale",
    "Ember": "Rhea Dunn", "Fable": "Sami Brook", "Gizmo": "Tess Harrow", "Hazel": "Ugo Fenn",
    "Inkwell": "Ada Moss", "Jasper": "Ivo Strand", "Kipper": "Lena Quill", "Lentil": "Omar Vale",
    "Maple": "Rhea Dunn", "Nimbus": "Sami Brook", "Olive": "Tess Harrow", "Paprika": "Ugo Fenn",
}  # fmt: skip
CITIES = {
    "Ada Moss": "Marrowby", "Ivo Strand": "Quillfield", "Lena Quill": "Dunhollow",
    "Omar Vale": "Brackenmoor", "Rhea Dunn": "Ashgrove", "Sami Brook": "Tillbury",
    "Tess Harrow": "Wrenmouth", "Ugo Fenn": "Kestrel Bay",
}  # fmt: skip


def find_owner(pet: str) -> str:
    """The owner of a pet, by the pet's name."""
    return OWNERS.get(pet.strip(), f"no pet named {pet!r}")


def find_city(person: str) -> str:
    """The city a person lives in, by the person's full name."""
    return CITIES.get(person.strip(), f"no person named {person!r}")


def _schema(name: str, description: str, argument: str, about: str) -> dict[str, Any]:
    parameters = {
        "type": "object",
        "properties": {argument: {"type": "string", "description": about}},
        "required": [argument],
    }
    function = {"name": name, "description": description, "parameters": parameters}
    return {"type": "function", "function": function}


TOOLS = [
    _schema("find_owner", "The owner of a pet, by the pet's name.", "pet", "The pet's name, e.g. Biscuit."),
    _schema("find_city", "The city a person lives in.", "person", "The person's full name, e.g. Ada Moss."),
]
FUNCTIONS = {"find_owner": find_owner, "find_city": find_city}
